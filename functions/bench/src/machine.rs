//! The machine a run measured, for the report: when, how many CPUs of which
//! model, how much memory, which kernel (read from Linux `/proc`; `null`
//! where it cannot be read). Figures from different machines do not compare.
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Machine {
    /// When the run started (UTC, RFC 3339).
    pub date: String,
    /// The CPUs this process may use.
    pub cpus: Option<usize>,
    pub cpu_model: Option<String>,
    pub memory_gib: Option<f64>,
    pub kernel: Option<String>,
}

impl Machine {
    pub fn now() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|line| line.starts_with("model name"))
            .and_then(|line| line.split_once(':'))
            .map(|(_, model)| model.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find(|line| line.starts_with("MemTotal:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .map(|kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|text| text.trim().to_owned());
        Self {
            date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            cpus: std::thread::available_parallelism().ok().map(usize::from),
            cpu_model,
            memory_gib,
            kernel,
        }
    }
}
