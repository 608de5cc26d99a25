//! Hand-rolled command-line parsing: `--key value`, `--key=value` and bare flags, plus the size
//! and duration formats the options accept.

use std::collections::HashMap;
use std::time::Duration;

/// A usage mistake: printed with the usage text, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parsed options of one subcommand.
#[derive(Debug, Default)]
pub struct Parsed {
    values: HashMap<&'static str, String>,
    flags: Vec<&'static str>,
}

/// Parses `args` against the accepted value options and flags (names without `--`).
pub fn parse(
    args: &[String],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<Parsed, UsageError> {
    let mut out = Parsed::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(body) = arg.strip_prefix("--") else {
            return Err(UsageError(format!("unexpected argument {arg:?}")));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if let Some(&flag) = flags.iter().find(|f| **f == name) {
            if inline.is_some() {
                return Err(UsageError(format!("--{name} takes no value")));
            }
            out.flags.push(flag);
        } else if let Some(&key) = values.iter().find(|k| **k == name) {
            let v = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| UsageError(format!("--{name} needs a value")))?,
            };
            out.values.insert(key, v);
        } else {
            return Err(UsageError(format!("unknown option --{name}")));
        }
    }
    Ok(out)
}

impl Parsed {
    /// The raw value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Whether flag `key` was given.
    pub fn flag(&self, key: &str) -> bool {
        self.flags.contains(&key)
    }

    /// `key` as a byte size, or `default`.
    pub fn size(&self, key: &str, default: u64) -> Result<u64, UsageError> {
        self.get(key).map_or(Ok(default), |v| {
            parse_size(v).map_err(|e| UsageError(format!("--{key}: {e}")))
        })
    }

    /// `key` as a positive integer in `1..=max`, or `default`.
    pub fn count(&self, key: &str, default: usize, max: usize) -> Result<usize, UsageError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(UsageError(format!(
                    "--{key}: expected an integer from 1 to {max}, got {v:?}"
                ))),
            },
        }
    }

    /// `key` as a duration, or `default`.
    pub fn duration(&self, key: &str, default: Duration) -> Result<Duration, UsageError> {
        self.get(key).map_or(Ok(default), |v| {
            parse_duration(v).map_err(|e| UsageError(format!("--{key}: {e}")))
        })
    }

    /// `key` as an unsigned integer (decimal or `0x` hex), if given.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, UsageError> {
        self.get(key)
            .map(|v| parse_u64(v).map_err(|e| UsageError(format!("--{key}: {e}"))))
            .transpose()
    }
}

/// Decimal or `0x` hexadecimal.
pub fn parse_u64(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse::<u64>(),
    };
    r.map_err(|_| format!("{v:?} is not an unsigned integer"))
}

/// `4096`, `64K`, `64KiB`, `1M`, `1.5G` (binary multiples); must be at least 1.
pub fn parse_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let lower = t.to_ascii_lowercase();
    let num_end = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(num_end);
    let shown = &t[num_end..];
    let mult: u64 = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{t:?}: unknown unit {shown:?} (use K, M or G)")),
    };
    let bytes = if num.contains('.') {
        let f: f64 = num.parse().map_err(|_| format!("{t:?} is not a size"))?;
        let b = f * mult as f64;
        if !b.is_finite() || b >= u64::MAX as f64 {
            return Err(format!("{t:?} is too large"));
        }
        b.round() as u64
    } else {
        num.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| format!("{t:?} is not a size"))?
    };
    if bytes == 0 {
        return Err(format!("{t:?}: size must be at least 1 byte"));
    }
    Ok(bytes)
}

/// `5`, `2.5`, `2.5s`, `500ms`; must be positive.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let t = v.trim().to_ascii_lowercase();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t.as_str(), 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 && f * scale < 1e7 => {
            Ok(Duration::from_secs_f64(f * scale))
        }
        _ => Err(format!(
            "{v:?} is not a positive duration (seconds, or e.g. 500ms)"
        )),
    }
}

/// `4 KiB`, `16 MiB`, `128 B`: the shortest exact binary unit.
pub fn human_size(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("64kib").unwrap(), 65536);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn options_and_flags() {
        let p = parse(
            &s(&["--op", "read", "--block-size=64K", "--json"]),
            &["op", "block-size"],
            &["json"],
        )
        .unwrap();
        assert_eq!(p.get("op"), Some("read"));
        assert_eq!(p.size("block-size", 1).unwrap(), 65536);
        assert!(p.flag("json"));
        assert!(!p.flag("verify"));
        assert!(parse(&s(&["--nope"]), &["op"], &[]).is_err());
        assert!(parse(&s(&["--op"]), &["op"], &[]).is_err());
        assert!(parse(&s(&["read"]), &["op"], &[]).is_err());
        assert!(parse(&s(&["--json=1"]), &[], &["json"]).is_err());
        let p = parse(&s(&["--threads", "0"]), &["threads"], &[]).unwrap();
        assert!(p.count("threads", 1, 64).is_err());
        assert_eq!(parse_u64("0x10").unwrap(), 16);
    }

    #[test]
    fn human() {
        assert_eq!(human_size(128), "128 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(16 << 20), "16 MiB");
        assert_eq!(human_size(1536), "1536 B");
    }
}
