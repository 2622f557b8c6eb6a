//! A network namespace a test creates (root only), for what loopback cannot
//! show: private and link-local listeners. A veth pair joins this (the root)
//! namespace to it: `host` on this side, the given addresses on its side, and
//! routes here to those outside `host`'s subnet. Listeners are bound inside it
//! from a thread that joined it (`setns`), so they live there while the test
//! serves them. Traffic stays on the veth pair. Deleting the namespace on drop
//! removes the pair and the routes through it.
//!
//! The routes are machine-wide state (a route to 169.254.169.254 shadows a
//! cloud metadata service meanwhile), so tests using this are `exclusive_*`.
use std::net::SocketAddr;
use std::process::Command;

/// Whether this process may create namespaces and links.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| format!("cannot run `ip` ({error}): install iproute2 (scripts/services.sh does)"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim())),
    }
}

pub struct TestNetns {
    name: String,
}

impl TestNetns {
    /// Creates namespace `name` (deleting a leftover of the same name first)
    /// joined by veth `<name>-h`/`<name>-n`; `host` (CIDR) is this side's
    /// address, `inside` (CIDRs) the namespace side's, the first in `host`'s
    /// subnet; the others are routed through it (host routes).
    pub fn create(name: &str, host: &str, inside: &[&str]) -> Result<Self, String> {
        let _ = ip(&["netns", "del", name]);
        let namespace = Self { name: name.to_owned() };
        let (host_if, inside_if) = (format!("{name}-h"), format!("{name}-n"));
        let _ = ip(&["link", "del", &host_if]);
        ip(&["netns", "add", name])?;
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &inside_if])?;
        ip(&["link", "set", &inside_if, "netns", name])?;
        ip(&["addr", "add", host, "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        let inside_ip = |cidr: &str| cidr.split('/').next().unwrap_or(cidr).to_owned();
        let gateway = inside_ip(inside.first().ok_or("no address inside")?);
        for cidr in inside {
            ip(&["-n", name, "addr", "add", cidr, "dev", &inside_if])?;
        }
        ip(&["-n", name, "link", "set", &inside_if, "up"])?;
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        // A host route per address: nothing else of those ranges is shadowed.
        for cidr in &inside[1..] {
            ip(&["route", "add", &inside_ip(cidr), "via", &gateway, "dev", &host_if])?;
        }
        Ok(namespace)
    }

    /// A listener bound to `address` inside the namespace.
    pub fn bind(&self, address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let namespace = std::fs::File::open(path)?;
            // SAFETY: setns on a valid namespace file descriptor; it changes
            // only this short-lived thread's network namespace.
            if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&namespace), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let listener = std::net::TcpListener::bind(address)?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the binding thread panicked")))
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        if let Err(error) = ip(&["netns", "del", &self.name]) {
            eprintln!("could not delete network namespace {}: {error}", self.name);
        }
    }
}
