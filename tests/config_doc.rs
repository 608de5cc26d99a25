//! The configuration page's option table is generated from the one table of engine options
//! (`src/engine/config/options.rs`): key, default, the environment variables that set it, and
//! its help. This test fails when the page and the code disagree; `UPDATE_DOCS=1 cargo test
//! --test config_doc` rewrites the block between the markers in `docs/configuration.md`.

use tidewire::Config;
use tidewire::engine::config::Env;

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
const BEGIN: &str =
    "<!-- options: generated from src/engine/config/options.rs by tests/config_doc.rs -->\n";
const END: &str = "<!-- options: end -->\n";

fn env_cell(env: &[Env]) -> String {
    let vars: Vec<String> = env
        .iter()
        .map(|e| match *e {
            Env::Value(v) | Env::Secret(v) => format!("`{v}`"),
            Env::Seconds(v, _) => format!("`{v}` (seconds)"),
            Env::Force(v, value) => format!("`{v}` (sets `{value}`)"),
        })
        .collect();
    vars.join(", ")
}

fn table() -> String {
    let base = Config::base();
    let mut out = String::from("| key | default | environment | meaning |\n|---|---|---|---|\n");
    for o in tidewire::engine::config::OPTIONS {
        let d = o.get(&base);
        let default = if d.is_empty() {
            "empty".to_string()
        } else {
            format!("`{d}`")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            o.key,
            default,
            env_cell(o.env),
            o.help.replace('|', "\\|")
        ));
    }
    out
}

#[test]
fn the_configuration_page_lists_every_option_as_the_code_has_it() {
    let page = std::fs::read_to_string(PAGE).unwrap();
    let (Some(a), Some(b)) = (page.find(BEGIN), page.find(END)) else {
        panic!("docs/configuration.md has no generated options block ({BEGIN:?} ... {END:?})");
    };
    let want = table();
    let have = &page[a + BEGIN.len()..b];
    if have != want {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let new = format!("{}{want}{}", &page[..a + BEGIN.len()], &page[b..]);
            std::fs::write(PAGE, new).unwrap();
            return;
        }
        panic!(
            "docs/configuration.md's option table is out of date: run `UPDATE_DOCS=1 cargo test \
             --test config_doc`\n--- expected ---\n{want}"
        );
    }
}
