//! Tracepoint record layouts from tracefs `events/<category>/<name>/format` files, turned into the
//! field offsets the eBPF programs read (their `.rodata` [`Config`]).

use relay_metrics_common::{Config, NO_FIELD};

/// One `field:` line of a format file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FormatField<'a> {
    /// The declaration before the name, e.g. `pid_t`, `__data_loc char[]`, `char`.
    pub type_name: &'a str,
    /// The field name without any array suffix.
    pub name: &'a str,
    /// Bytes from the start of the record.
    pub offset: u16,
    /// Bytes of the field.
    pub size: u16,
}

/// Finds `name` among the `field:` lines of a format file.
pub(super) fn find_field<'a>(format: &'a [u8], name: &str) -> Option<FormatField<'a>> {
    fields(format).find(|field| field.name == name)
}

/// Every `field:` line of a format file; malformed lines are skipped.
pub(super) fn fields(format: &[u8]) -> impl Iterator<Item = FormatField<'_>> {
    let text = std::str::from_utf8(format).unwrap_or("");
    text.lines().filter_map(parse_field_line)
}

/// Parses `\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;`.
fn parse_field_line(line: &str) -> Option<FormatField<'_>> {
    let rest = line.trim_start().strip_prefix("field:")?;
    let mut parts = rest.split(';').map(str::trim);
    let declaration = parts.next()?;
    let offset = parts.next()?.strip_prefix("offset:")?.parse().ok()?;
    let size = parts.next()?.strip_prefix("size:")?.parse().ok()?;
    let (type_name, name) = declaration.rsplit_once(' ')?;
    let name = name.split('[').next()?;
    Some(FormatField {
        type_name: type_name.trim(),
        name,
        offset,
        size,
    })
}

/// The offset of `name` when it has `size` bytes, else [`NO_FIELD`]: a field whose size changed is
/// not read at all rather than read wrongly.
pub(super) fn offset_of(format: &[u8], name: &str, size: u16) -> u16 {
    match find_field(format, name) {
        Some(field) if field.size == size => field.offset,
        _ => NO_FIELD,
    }
}

/// The bits of `sched_switch`'s `prev_state` that report a sleeping state, from its print format
/// `(REC->prev_state & ((((0x00000000 | 0x00000001 | ... ) + 1) << 1) - 1))`: the task-report mask.
/// Anything else (0, or the preemption marker above the mask) means the task was still runnable.
pub fn sleep_state_mask(format: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(format).ok()?;
    let start = text.find("REC->prev_state & ((((")? + "REC->prev_state & ((((".len();
    let end = start + text[start..].find(')')?;
    let mut bits = 0u64;
    for token in text[start..end].split('|') {
        let hex = token.trim().strip_prefix("0x")?;
        bits |= u64::from_str_radix(hex, 16).ok()?;
    }
    // Bits that do not leave room for the shift are no task-report mask this kernel could print.
    let next = bits.checked_add(1).filter(|&next| next <= u64::MAX >> 1)?;
    Some((next << 1) - 1)
}

/// The format files the programs depend on, as bytes (empty when unreadable).
#[derive(Debug, Default)]
pub struct Formats {
    /// `task/task_newtask`.
    pub newtask: Vec<u8>,
    /// `sched/sched_process_exit`.
    pub exit: Vec<u8>,
    /// `sched/sched_switch`.
    pub switch: Vec<u8>,
    /// `sched/sched_wakeup`.
    pub wakeup: Vec<u8>,
    /// `sched/sched_wakeup_new`.
    pub wakeup_new: Vec<u8>,
    /// `oom/mark_victim`.
    pub mark_victim: Vec<u8>,
    /// `vmscan/mm_vmscan_throttled`.
    pub throttled: Vec<u8>,
}

/// Builds the programs' configuration from the format files.
pub fn config(formats: &Formats) -> Config {
    let victim = formats.mark_victim.as_slice();
    Config {
        newtask_pid: offset_of(&formats.newtask, "pid", 4),
        newtask_clone_flags: offset_of(&formats.newtask, "clone_flags", 8),
        exit_pid: offset_of(&formats.exit, "pid", 4),
        exit_group_dead: offset_of(&formats.exit, "group_dead", 1),
        switch_prev_pid: offset_of(&formats.switch, "prev_pid", 4),
        switch_prev_state: offset_of(&formats.switch, "prev_state", 8),
        switch_next_pid: offset_of(&formats.switch, "next_pid", 4),
        wakeup_pid: offset_of(&formats.wakeup, "pid", 4),
        wakeup_new_pid: offset_of(&formats.wakeup_new, "pid", 4),
        victim_pid: offset_of(victim, "pid", 4),
        victim_total_vm: offset_of(victim, "total_vm", 8),
        victim_anon_rss: offset_of(victim, "anon_rss", 8),
        victim_file_rss: offset_of(victim, "file_rss", 8),
        victim_shmem_rss: offset_of(victim, "shmem_rss", 8),
        victim_uid: offset_of(victim, "uid", 4),
        victim_pgtables: offset_of(victim, "pgtables", 8),
        victim_oom_score_adj: offset_of(victim, "oom_score_adj", 2),
        throttled_usec_delayed: offset_of(&formats.throttled, "usec_delayed", 4),
        sched_tracked_only: 0,
        _pad: 0,
        sleep_state_mask: sleep_state_mask(&formats.switch).unwrap_or(0xff),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on this machine (Linux 6.18).
    const SWITCH: &[u8] = b"name: sched_switch\nID: 331\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\nprint fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state, \"|\") : \"R\"\n";
    const VICTIM: &[u8] = b"name: mark_victim\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] comm;\toffset:12;\tsize:4;\tsigned:0;\n\tfield:unsigned long total_vm;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:unsigned long anon_rss;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:unsigned long file_rss;\toffset:32;\tsize:8;\tsigned:0;\n\tfield:unsigned long shmem_rss;\toffset:40;\tsize:8;\tsigned:0;\n\tfield:uid_t uid;\toffset:48;\tsize:4;\tsigned:0;\n\tfield:unsigned long pgtables;\toffset:56;\tsize:8;\tsigned:0;\n\tfield:short oom_score_adj;\toffset:64;\tsize:2;\tsigned:1;\n\nprint fmt: \"pid=%d\"\n";

    #[test]
    fn parses_sched_switch_fields_and_sleep_mask() {
        assert_eq!(offset_of(SWITCH, "prev_pid", 4), 24);
        assert_eq!(offset_of(SWITCH, "prev_state", 8), 32);
        assert_eq!(offset_of(SWITCH, "next_pid", 4), 56);
        let comm = find_field(SWITCH, "next_comm").unwrap();
        assert_eq!((comm.type_name, comm.offset, comm.size), ("char", 40, 16));
        assert_eq!(sleep_state_mask(SWITCH), Some(0xff));
    }

    #[test]
    fn a_field_of_another_size_is_not_read() {
        assert_eq!(offset_of(SWITCH, "prev_state", 4), NO_FIELD);
        assert_eq!(offset_of(SWITCH, "missing", 4), NO_FIELD);
    }

    #[test]
    fn reads_mark_victim_offsets() {
        let formats = Formats {
            mark_victim: VICTIM.to_vec(),
            switch: SWITCH.to_vec(),
            ..Formats::default()
        };
        let config = config(&formats);
        assert_eq!(config.victim_pid, 8);
        assert_eq!(config.victim_anon_rss, 24);
        assert_eq!(config.switch_next_pid, 56);
        assert_eq!(config.victim_oom_score_adj, 64);
        assert_eq!(config.victim_pgtables, 56);
        assert_eq!(config.newtask_pid, NO_FIELD);
    }

    #[test]
    fn malformed_input_gives_nothing() {
        assert_eq!(fields(b"\xff\xfe field:x").count(), 0);
        assert!(find_field(b"\tfield:int pid;\toffset:x;\tsize:4;", "pid").is_none());
        assert_eq!(
            sleep_state_mask(b"print fmt: REC->prev_state & ((((0xzz)"),
            None
        );
    }

    /// Found while writing the `tracefs_format` fuzz target: state bits at the top of the word
    /// overflowed `(bits + 1) << 1` (a panic with overflow checks, a wrong mask without).
    #[test]
    fn a_mask_that_does_not_fit_is_refused() {
        let mask = |bits: &str| {
            sleep_state_mask(format!("REC->prev_state & (((({bits}) + 1) << 1) - 1)").as_bytes())
        };
        assert_eq!(mask("0xffffffffffffffff"), None);
        assert_eq!(mask("0x8000000000000000"), None);
        assert_eq!(mask("0x7fffffffffffffff"), None);
        assert_eq!(mask("0x7ffffffffffffffe"), Some(u64::MAX - 2));
        assert_eq!(
            mask("0x4000000000000000 | 0x1"),
            Some(0x8000_0000_0000_0003)
        );
        assert_eq!(mask("0x00000000 | 0x00000001"), Some(0b11));
    }
}
