//! Records the git commit the binary is built from (`--version`, `/metrics` build info). A
//! build outside a git checkout (a source tarball) says `unknown`; `SKILLPILOT_GIT_COMMIT`
//! set by a packager wins.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SKILLPILOT_GIT_COMMIT");
    let commit = std::env::var("SKILLPILOT_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|c| !c.is_empty())
    });
    // Rebuilt when HEAD moves (a commit, a checkout).
    if let Ok(out) = Command::new("git").args(["rev-parse", "--git-dir"]).output() {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !dir.is_empty() {
            println!("cargo:rerun-if-changed={dir}/HEAD");
            println!("cargo:rerun-if-changed={dir}/refs/heads");
        }
    }
    println!("cargo:rustc-env=SKILLPILOT_GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
