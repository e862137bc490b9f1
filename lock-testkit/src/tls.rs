//! TLS for test servers: a throwaway CA and a certificate for 127.0.0.1, made with the
//! `openssl` command.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::scratch::{ScratchDir, scratch_dir};
use crate::server::RedisServerBuilder;

/// A CA and a server certificate (for `IP:127.0.0.1`), valid for a day, in a temporary
/// directory removed on drop.
#[derive(Debug)]
pub struct TestCertificates {
    dir: ScratchDir,
}

impl TestCertificates {
    /// Generates them. Needs the `openssl` command (Debian: `apt-get install openssl`).
    #[must_use]
    pub fn generate() -> Self {
        let dir = scratch_dir();
        let run = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("the openssl command (apt-get install openssl)");
            assert!(status.success(), "openssl {args:?} failed");
        };
        let days = ["-days", "1"];
        run(&[
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes"][..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-subj",
                "/CN=lock-test-ca",
            ],
            &days,
        ]
        .concat());
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(dir.path().join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")
            .expect("writing ext.cnf");
        run(&[
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
            ][..],
            &[
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-extfile",
                "ext.cnf",
            ],
            &days,
        ]
        .concat());
        Self { dir }
    }

    /// The CA certificate, PEM: what a client trusts.
    #[must_use]
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.file("ca.crt")).expect("reading ca.crt")
    }

    /// Adds a TLS listener on `tls_port` (the plain port stays) to a server.
    pub fn serve(&self, builder: RedisServerBuilder, tls_port: u16) -> RedisServerBuilder {
        let path = |name: &str| self.file(name).display().to_string();
        builder
            .config_line(format!("tls-port {tls_port}"))
            .config_line(format!("tls-cert-file {}", path("server.crt")))
            .config_line(format!("tls-key-file {}", path("server.key")))
            .config_line(format!("tls-ca-cert-file {}", path("ca.crt")))
            .config_line("tls-auth-clients no")
    }

    pub(crate) fn file(&self, name: &str) -> std::path::PathBuf {
        Path::new(self.dir.path()).join(name)
    }
}
