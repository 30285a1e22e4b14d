//! A TLS server on loopback whose certificate no client should accept: self-signed, for the name
//! `wrong-name.invalid` (`tests/fixtures/tls/`, made for tests with `openssl req -x509`, valid
//! until 2126; its key guards nothing). It completes what handshakes it can and serves nothing.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const CERTIFICATE: &[u8] = include_bytes!("../fixtures/tls/wrong-name.crt.der");
const KEY: &[u8] = include_bytes!("../fixtures/tls/wrong-name.key.der");

/// Listens on a free loopback port for the rest of the test (a thread per connection).
pub fn wrong_name_server() -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(CERTIFICATE.to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(KEY.to_vec())),
        )
        .expect("the test certificate and key");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the TLS server");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(mut connection) = rustls::ServerConnection::new(config) else {
                    return;
                };
                // Until the client gives up on the certificate (an alert, or it closes).
                while connection.is_handshaking() {
                    match connection.complete_io(&mut stream) {
                        Ok((0, 0)) => return,
                        Ok(_) => {}
                        Err(error) if error.kind() == ErrorKind::Interrupted => {}
                        Err(_) => return,
                    }
                }
            });
        }
    });
    addr
}
