//! PEM certificates and private keys for the agent's TLS (the endpoint's and the OTLP
//! client's), read through the input guard ([`crate::config::read_input_file`]).

use std::path::Path;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{read_input_file, InputKind};

/// The PEM certificates of `path` (at least one), read through the input guard. The error
/// starts with the path.
pub(crate) fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let fail = |reason: String| format!("{}: {reason}", path.display());
    let bytes = read_input_file(path, InputKind::Certificates).map_err(fail)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The PEM private key of `path`, read through the input guard. The error starts with the
/// path.
pub(crate) fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let fail = |reason: String| format!("{}: {reason}", path.display());
    let bytes = read_input_file(path, InputKind::PrivateKey).map_err(fail)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| fail(e.to_string()))
}
