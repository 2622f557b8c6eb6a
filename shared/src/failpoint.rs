//! Crash points for fault-injection tests: a process started with
//! `RELAYOPS_FAILPOINTS=<name>[,<name>…]` aborts (like `kill -9`: no cleanup, no
//! unwinding) when it reaches a named point. Unset in production, where each
//! check is one cached lookup.
use std::sync::OnceLock;

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var("RELAYOPS_FAILPOINTS")
            .map(|names| names.split(',').map(|name| name.trim().to_owned()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default()
    })
}

/// Whether `name` is armed (for a crash point that must first bring the
/// process to a precise state, e.g. wait for some confirms).
pub fn is_armed(name: &str) -> bool {
    armed().iter().any(|armed| armed == name)
}

/// Aborts the process if `name` is armed.
pub fn crash_if_armed(name: &str) {
    if is_armed(name) {
        eprintln!("failpoint {name}: aborting the process");
        std::process::abort();
    }
}
