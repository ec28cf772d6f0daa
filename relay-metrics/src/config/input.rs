//! The one guard every input file goes through (the config, the web config, TLS certificates
//! and keys, the OTLP CA and client certificate): it must be a regular file (after symlinks) no
//! larger than its kind's cap. The file is opened without blocking and checked with `fstat` on
//! the opened descriptor, so a FIFO is refused instead of waited on, a device (`/dev/zero`) is
//! never read, and nothing is allocated in proportion to the file before its size is known.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// What an input file holds, which sets how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A Relay/relay-metrics configuration (JSON or TOML): a full one is a few KiB.
    Config,
    /// An exporter-toolkit web config (YAML): a few lines, or one per basic-auth user.
    WebConfig,
    /// PEM certificates: a chain or a CA bundle (the system's whole bundle is ~220 KiB).
    Certificates,
    /// A PEM private key (an RSA key of 16,384 bits is ~13 KiB).
    PrivateKey,
}

impl InputKind {
    /// The largest file of this kind that is read.
    pub const fn max_bytes(self) -> u64 {
        match self {
            Self::Config | Self::WebConfig | Self::PrivateKey => 1024 * 1024,
            Self::Certificates => 4 * 1024 * 1024,
        }
    }
}

/// Reads `path` whole after checking that it is a regular file of at most `kind`'s cap. The
/// error is one line without the path (the caller names the file and its role).
pub fn read_input_file(path: &Path, kind: InputKind) -> Result<Vec<u8>, String> {
    let max = kind.max_bytes();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| error.to_string())?;
    let metadata = file.metadata().map_err(|error| error.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".into());
    }
    let too_large = || format!("larger than {} ({max} bytes)", human(max));
    if metadata.len() > max {
        return Err(too_large());
    }
    // The size from fstat bounds the buffer; `take` bounds the read should the file grow.
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// A cap in MiB (every cap is a whole number of MiB).
fn human(bytes: u64) -> String {
    format!("{} MiB", bytes / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_up_to_the_cap_are_read_and_others_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("input.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        for kind in [
            InputKind::Config,
            InputKind::WebConfig,
            InputKind::Certificates,
            InputKind::PrivateKey,
        ] {
            // Without a writer, a blocking open of the FIFO would never return.
            assert_eq!(
                read_input_file(&fifo, kind).unwrap_err(),
                "not a regular file"
            );
            assert_eq!(
                read_input_file(Path::new("/dev/zero"), kind).unwrap_err(),
                "not a regular file"
            );
            assert_eq!(
                read_input_file(dir.path(), kind).unwrap_err(),
                "not a regular file"
            );
            let max = usize::try_from(kind.max_bytes()).unwrap();
            let file = dir.path().join("input");
            std::fs::write(&file, vec![b'x'; max]).unwrap();
            assert_eq!(read_input_file(&file, kind).unwrap().len(), max);
            std::fs::write(&file, vec![b'x'; max + 1]).unwrap();
            let error = read_input_file(&file, kind).unwrap_err();
            assert_eq!(
                error,
                format!("larger than {} MiB ({max} bytes)", max / (1024 * 1024))
            );
        }
        let missing = read_input_file(&dir.path().join("missing"), InputKind::Config);
        assert!(missing.unwrap_err().contains("No such file"));
    }
}
