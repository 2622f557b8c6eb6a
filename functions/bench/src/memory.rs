//! Peak and current resident memory of every running `relayops` process on
//! the bench's database (Linux /proc; see `proc_cpu::same_database`).
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    pub pid: u32,
    pub command: String,
    pub peak_rss_mib: f64,
    pub rss_mib: f64,
}

fn kib(status: &str, field: &str) -> Option<f64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse::<f64>().ok()
}

pub fn relayops_processes() -> Vec<ProcessMemory> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let database_url = std::env::var("RELAYOPS_DATABASE_URL").ok();
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() != "relayops" || !crate::proc_cpu::same_database(pid, database_url.as_deref()) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default().replace('\0', " ");
        found.push(ProcessMemory {
            pid,
            command: cmdline.trim().to_owned(),
            peak_rss_mib: kib(&status, "VmHWM:").unwrap_or(0.0) / 1024.0,
            rss_mib: kib(&status, "VmRSS:").unwrap_or(0.0) / 1024.0,
        });
    }
    found
}

/// Peak resident memory of one process (0 if it is gone).
pub fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    kib(&status, "VmHWM:").unwrap_or(0.0) / 1024.0
}
