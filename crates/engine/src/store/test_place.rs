//! Where the store's tests keep their state: a SQLite file in a temporary directory, or a fresh
//! schema in the sandbox's PostgreSQL (`TAO_SLURM_TEST_DATABASE_URL`, from the environment or the
//! sandbox's settings.env). `both!` runs a test on each, the PostgreSQL variant with the
//! `postgres-tests` feature (dev/test turns it on). With the feature and without the URL a PostgreSQL
//! test fails and says how to get one: it is never skipped.
// Without the feature nothing here reaches PostgreSQL.
#![cfg_attr(not(feature = "postgres-tests"), allow(dead_code))]

use super::Store;
use std::sync::Arc;

const SETTINGS_ENV: &str = "/var/lib/tao-slurm-sandbox/settings.env";

/// The sandbox's test database URL (`dev/sandbox/up.sh` starts it and writes it to settings.env).
pub fn database_url() -> String {
    if let Some(url) = std::env::var("TAO_SLURM_TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        return url;
    }
    let from_file = std::fs::read_to_string(SETTINGS_ENV).ok().and_then(|text| {
        text.lines().find_map(|l| l.strip_prefix("TAO_SLURM_TEST_DATABASE_URL=").map(|u| u.trim().to_string()))
    });
    from_file.filter(|u| !u.is_empty()).unwrap_or_else(|| {
        panic!(
            "the store's PostgreSQL tests need TAO_SLURM_TEST_DATABASE_URL (in the environment or {SETTINGS_ENV}): \
             run `bash dev/sandbox/up.sh` (it starts PostgreSQL and writes the URL) or set it to a database \
             you may create schemas in"
        )
    })
}

enum Inner {
    Sqlite(tempfile::TempDir),
    Postgres { url: String, schema: String },
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Inner::Postgres { url, schema } = self {
            if let Ok(mut c) = postgres::Client::connect(url, postgres::NoTls) {
                let _ = c.batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS {} CASCADE",
                    super::postgres_schema::quote_ident(schema)
                ));
            }
        }
    }
}

/// One test's state, shared by every store the test opens on it (clone it into threads).
#[derive(Clone)]
pub struct Place(Arc<Inner>);

impl Place {
    pub fn sqlite() -> Place {
        Place(Arc::new(Inner::Sqlite(tempfile::tempdir().unwrap())))
    }

    /// A schema of its own, dropped when the test ends.
    pub fn postgres() -> Place {
        let schema = format!("test_{}", uuid::Uuid::new_v4().simple());
        Place(Arc::new(Inner::Postgres { url: database_url(), schema }))
    }

    pub fn open(&self) -> Store {
        self.try_open().unwrap()
    }

    /// The service database on this place.
    pub fn service_db(&self) -> super::service_records::ServiceDb {
        match &*self.0 {
            Inner::Sqlite(dir) => super::service_records::ServiceDb::open(&dir.path().join("s.db")).unwrap(),
            Inner::Postgres { url, schema } => super::service_records::ServiceDb::open_postgres(
                super::postgres_schema::Target { url, password: None, ca_file: None },
                schema,
            )
            .unwrap(),
        }
    }

    pub fn try_open(&self) -> Result<Store, super::StoreError> {
        match &*self.0 {
            Inner::Sqlite(dir) => Store::open(&dir.path().join("state.db")),
            Inner::Postgres { url, schema } => Store::open_postgres(url, schema),
        }
    }
}

/// `both! { fn name(place) { ... } }`: the test `name::sqlite` and `name::postgres`, each with its
/// own [`Place`].
macro_rules! both {
    ($(fn $name:ident($place:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn run($place: &$crate::store::test_place::Place) $body
            #[test]
            fn sqlite() {
                run(&$crate::store::test_place::Place::sqlite())
            }
            #[cfg(feature = "postgres-tests")]
            #[test]
            fn postgres() {
                run(&$crate::store::test_place::Place::postgres())
            }
        }
    )*};
}
pub(crate) use both;
