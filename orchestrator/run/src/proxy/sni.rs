//! Reading the server name (SNI) out of a TLS ClientHello without terminating TLS: the
//! bytes are only inspected, then forwarded unchanged to the real server.

use rustls::server::Acceptor;

/// What the first bytes of a tunnel turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not TLS at all (the first byte is not a handshake record).
    NotTls,
    /// More bytes are needed to see the whole ClientHello.
    Incomplete,
    /// A ClientHello, with the name it asks for, if any.
    Tls(Option<String>),
    /// TLS, but not a ClientHello rustls can read.
    Malformed(String),
}

/// Inspects `bytes`, everything the client has sent so far.
pub fn inspect(bytes: &[u8]) -> Hello {
    match bytes.first() {
        None => return Hello::Incomplete,
        Some(0x16) => {}
        Some(_) => return Hello::NotTls,
    }
    let mut acceptor = Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Hello::Malformed(e.to_string()),
        }
    }
    match acceptor.accept() {
        Ok(None) => Hello::Incomplete,
        Ok(Some(accepted)) => Hello::Tls(accepted.client_hello().server_name().map(str::to_string)),
        Err((e, _alert)) => Hello::Malformed(e.to_string()),
    }
}
