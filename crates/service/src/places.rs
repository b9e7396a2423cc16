//! Places taken by this replica's requests between their check and the moment what they make is
//! recorded (a workspace, whose preflight takes a while), by org: checked and taken under one lock,
//! so that parallel requests here are refused early. The cap itself is held by the database, which
//! counts every replica's records when one is written (`policy`).

use super::error::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The places of one kind (an org's workspaces), by org.
#[derive(Default, Clone)]
pub struct Places(Arc<Mutex<HashMap<String, u32>>>);

impl Places {
    /// Count what `org` has now (`counted`, read under the lock) plus the places taken; `check` that
    /// number; then take one more place.
    pub fn take(
        &self,
        org: &str,
        counted: impl FnOnce() -> u32,
        check: impl FnOnce(u32) -> Result<(), ApiError>,
    ) -> Result<Place, ApiError> {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = counted() + taken.get(org).copied().unwrap_or(0);
        check(n)?;
        *taken.entry(org.to_string()).or_default() += 1;
        Ok(Place { places: self.clone(), org: org.to_string() })
    }

    fn give_back(&self, org: &str) {
        let mut taken = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = taken.get_mut(org) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                taken.remove(org);
            }
        }
    }
}

/// A place taken: given back when dropped (after what it was for is counted, or failed).
pub struct Place {
    places: Places,
    org: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.places.give_back(&self.org);
    }
}
