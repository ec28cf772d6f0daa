//! The host's identity as the kernel gives it: the UTS namespace's host name and a random UUID,
//! each from its `/proc/sys/kernel` file, and the CPUs online (`None` when unreadable or empty).

/// The UTS namespace's host name (`/proc/sys/kernel/hostname`), as gethostname(2) returns it.
pub(crate) fn hostname() -> Option<String> {
    read_trimmed("/proc/sys/kernel/hostname")
}

/// A fresh random UUID from the kernel (`/proc/sys/kernel/random/uuid`: a new one per read).
pub(crate) fn random_uuid() -> Option<String> {
    read_trimmed("/proc/sys/kernel/random/uuid")
}

/// How many CPUs are online, the most that processes started here can run on at once (a
/// process may widen the affinity it inherited, within its cpuset): the list in
/// `<sys>/devices/system/cpu/online` counted, as glibc's `sysconf(_SC_NPROCESSORS_ONLN)` does.
pub(crate) fn online_cpus(roots: &crate::source::Roots) -> Option<u32> {
    let list = std::fs::read(roots.sys.join("devices/system/cpu/online")).ok()?;
    crate::source::cgroup::parse_cpu_list_count(&list).filter(|count| *count > 0)
}

/// When the machine booted, seconds since the epoch: the `btime` line of `/proc/stat`.
pub(crate) fn boot_time_seconds() -> Option<u64> {
    boot_time(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The `btime` line of `/proc/stat` content.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .ok()
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_btime() {
        let stat = "cpu  1 2 3 4\nintr 1 2\nbtime 1764900000\nprocesses 42\n";
        assert_eq!(super::boot_time(stat), Some(1_764_900_000));
        assert_eq!(super::boot_time("cpu 1 2\n"), None);
    }

    /// Against `getconf _NPROCESSORS_ONLN` (glibc counts the same list); a tree without the
    /// file has no count.
    #[test]
    fn the_online_cpus_are_getconfs() {
        let getconf = std::process::Command::new("getconf")
            .arg("_NPROCESSORS_ONLN")
            .output()
            .unwrap();
        let witness: u32 = String::from_utf8(getconf.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let host = crate::source::Roots::host();
        assert_eq!(super::online_cpus(&host), Some(witness));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            super::online_cpus(&crate::source::Roots::fixture(empty.path())),
            None
        );
    }

    /// Against `uname -n` (the same UTS name through uname(2)) and the UUID's form.
    #[test]
    fn the_host_name_is_unames_and_each_uuid_is_new() {
        let uname = std::process::Command::new("uname")
            .arg("-n")
            .output()
            .unwrap();
        let witness = String::from_utf8(uname.stdout).unwrap();
        assert_eq!(super::hostname().as_deref(), Some(witness.trim()));
        let (a, b) = (super::random_uuid().unwrap(), super::random_uuid().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36, "{a}");
        assert_eq!(a.matches('-').count(), 4, "{a}");
    }
}
