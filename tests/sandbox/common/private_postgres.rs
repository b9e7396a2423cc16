//! A PostgreSQL server of a test's own (Debian's binaries), so that stopping it or changing how it is
//! reached touches no other test: plain, or with TLS only (`start_tls`: a CA of the test's, a server
//! certificate for 127.0.0.1, and every connection without TLS refused).

use std::path::PathBuf;
use std::process::Command;

/// A PostgreSQL server in a temporary directory, on a free loopback port, trusting its one role
/// (`tao`) from 127.0.0.1 only; stopped when dropped.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let pg = PrivatePostgres::init();
        pg.up();
        pg
    }

    /// A server that takes TLS connections only, with a certificate for 127.0.0.1 from a CA of its
    /// own (`ca_file`); a connection without TLS is refused by its pg_hba.conf.
    pub fn start_tls() -> PrivatePostgres {
        let pg = PrivatePostgres::init();
        let d = pg.dir.path();
        let openssl = |args: &[&str]| run(Command::new("openssl").current_dir(d).args(args));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=tao-slurm test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(d.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ]);
        run(Command::new("chown").arg("postgres:postgres").arg(d.join("server.key")).arg(d.join("server.pem")));
        run(Command::new("chmod").arg("600").arg(d.join("server.key")));
        let conf = pg.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
            d.join("server.pem").display(),
            d.join("server.key").display()
        ));
        std::fs::write(&conf, text).unwrap();
        // The first line that matches decides: TLS from 127.0.0.1 is trusted, anything else refused.
        std::fs::write(
            pg.data().join("pg_hba.conf"),
            "local all all trust\nhostssl all tao 127.0.0.1/32 trust\nhost all all 0.0.0.0/0 reject\n",
        )
        .unwrap();
        pg.up();
        pg
    }

    /// A query's rows (`|`-separated), run over the server's Unix socket as the role `tao`.
    pub fn sql(&self, query: &str) -> String {
        let out = self
            .as_postgres("psql")
            .arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string(), "-U", "tao", "-d", "postgres", "-Atc", query])
            .output()
            .unwrap();
        assert!(out.status.success(), "psql {query}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The CA of `start_tls`'s server certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn init() -> PrivatePostgres {
        let newest = std::fs::read_dir("/usr/lib/postgresql")
            .expect("Debian's PostgreSQL (dev/sandbox/up.sh installs it)")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .max()
            .expect("a PostgreSQL version under /usr/lib/postgresql");
        let bin = PathBuf::from(format!("/usr/lib/postgresql/{newest}/bin"));
        let dir = tempfile::Builder::new().prefix("tao-slurm-pg-").tempdir_in("/tmp").unwrap();
        // PostgreSQL runs as its own user, never root: the directory is theirs.
        run(Command::new("chown").arg("postgres:postgres").arg(dir.path()));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let pg = PrivatePostgres { dir, bin, port };
        run(pg
            .as_postgres("initdb")
            .args(["-U", "tao", "--auth=trust", "-E", "UTF8", "--no-sync", "-D"])
            .arg(pg.data()));
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn as_postgres(&self, tool: &str) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(self.bin.join(tool));
        c
    }

    pub fn up(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        run(self
            .as_postgres("pg_ctl")
            .args(["-w", "-t", "60", "-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .arg("-D")
            .arg(self.data())
            .arg("start"));
    }

    pub fn down(&self) {
        run(self.as_postgres("pg_ctl").args(["-w", "-m", "fast", "-D"]).arg(self.data()).arg("stop"));
    }

    pub fn url(&self) -> String {
        format!("postgresql://tao@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.as_postgres("pg_ctl").args(["-m", "immediate", "-D"]).arg(self.data()).arg("stop").output();
    }
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
