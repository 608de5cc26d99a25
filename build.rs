//! Gives the shared library its SONAME, `libtidewire.so.<major>`, so programs linked against it
//! keep working across compatible (minor) updates and `make install` can lay out the usual
//! `libtidewire.so -> .so.<major> -> .so.<major>.<minor>` chain.

fn main() {
    let major =
        std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtidewire.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
