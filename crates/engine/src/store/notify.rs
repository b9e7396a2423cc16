//! Webhook notifications (issue 26): a job's own webhooks, the outbox of messages (a row per message
//! and webhook, unique by the message's key, kept once delivered) and the monitors' cursors over the
//! events. Delivery keeps each webhook's order: only its oldest open message is due.

use super::sql::{params, OptionalExtension};
use super::{Store, StoreError};

/// A message due for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub id: i64,
    pub url: String,
    pub job_id: String,
    pub body: String,
    pub tries: u32,
}

impl Store {
    /// Record a job's own webhooks (`--notify`).
    pub fn add_job_webhooks(&self, job_id: &str, urls: &[String]) -> Result<(), StoreError> {
        for url in urls {
            self.conn
                .prepare_cached("INSERT INTO job_webhooks (job_id, url) VALUES (?1, ?2) ON CONFLICT DO NOTHING")
                .and_then(|mut st| st.execute(params![job_id, url]))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// A job's own webhooks, in the order given.
    pub fn job_webhooks(&self, job_id: &str) -> Result<Vec<String>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT url FROM job_webhooks WHERE job_id = ?1 ORDER BY rowid")
            .map_err(|e| self.err(e))?;
        let rows = st.query_map(params![job_id], |r| r.get(0)).map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<String>, _>>().map_err(|e| self.err(e))
    }

    /// Of the jobs `job_ids` (full ids), those with webhooks of their own: one query for a batch of
    /// events, whose other jobs have nobody to tell.
    pub fn jobs_with_webhooks(&self, job_ids: &[&str]) -> Result<std::collections::HashSet<String>, StoreError> {
        if job_ids.is_empty() {
            return Ok(Default::default());
        }
        let sql = format!(
            "SELECT DISTINCT job_id FROM job_webhooks WHERE job_id IN ({})",
            super::sql::in_marks(job_ids.len())
        );
        let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows =
            st.query_map(super::sql::params_from_iter(job_ids.iter()), |r| r.get(0)).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Where the monitor `name` stopped reading events (None: it never started).
    pub fn notify_cursor(&self, name: &str) -> Result<Option<i64>, StoreError> {
        self.conn
            .query_row("SELECT last_event_id FROM notify_cursors WHERE name = ?1", params![name], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))
    }

    pub fn set_notify_cursor(&self, name: &str, last_event_id: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO notify_cursors (name, last_event_id) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET last_event_id = excluded.last_event_id",
                params![name, last_event_id],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Queue a message for a webhook; a message already queued under its key adds nothing.
    pub fn enqueue_notification(
        &self,
        key: &str,
        url: &str,
        job_id: &str,
        body: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO notifications (key, url, job_id, body, next_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![key, url, job_id, body, now]))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Each webhook's oldest open message, when it is due and nobody holds it.
    pub fn due_notifications(&self, now: i64) -> Result<Vec<Outgoing>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT n.id, n.url, n.job_id, n.body, n.tries FROM notifications n
                 WHERE n.id IN (SELECT MIN(id) FROM notifications
                                WHERE delivered_at IS NULL AND given_up_at IS NULL GROUP BY url)
                   AND n.next_at <= ?1 AND (n.claimed_until IS NULL OR n.claimed_until < ?1)
                 ORDER BY n.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![now], |r| {
                Ok(Outgoing { id: r.get(0)?, url: r.get(1)?, job_id: r.get(2)?, body: r.get(3)?, tries: r.get(4)? })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Take a message for delivery until `until`; false when another process holds it or it is done.
    pub fn claim_notification(&self, id: i64, now: i64, until: i64) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE notifications SET claimed_until = ?3 WHERE id = ?1 AND delivered_at IS NULL
                 AND given_up_at IS NULL AND (claimed_until IS NULL OR claimed_until < ?2)",
                params![id, now, until],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    pub fn notification_delivered(&self, id: i64, now: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE notifications SET delivered_at = ?2, tries = tries + 1, claimed_until = NULL WHERE id = ?1",
                params![id, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A failed try: due again at `next_at`, or given up (`next_at` None). `error` names no URL.
    /// Every message's last delivery error, by id (tests).
    #[cfg(test)]
    pub fn notification_errors(&self) -> Result<Vec<Option<String>>, StoreError> {
        let mut st = self.conn.prepare("SELECT last_error FROM notifications ORDER BY id").map_err(|e| self.err(e))?;
        let rows = st.query_map([], |r| r.get(0)).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    pub fn notification_failed(&self, id: i64, error: &str, next_at: Option<i64>, now: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE notifications SET tries = tries + 1, last_error = ?2, claimed_until = NULL,
                 next_at = COALESCE(?3, next_at), given_up_at = CASE WHEN ?3 IS NULL THEN ?4 END WHERE id = ?1",
                params![id, error, next_at, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    const NOW: i64 = 1_700_000_000;

    use crate::store::test_place::both;

    both! { fn a_message_is_queued_once_and_each_webhook_gets_its_oldest_first(place) {
        let s = place.open();
        assert!(s.enqueue_notification("j:1:started", "http://a/x", "j", "{}", NOW).unwrap());
        assert!(!s.enqueue_notification("j:1:started", "http://a/x", "j", "{}", NOW).unwrap(), "once per key");
        assert!(s.enqueue_notification("j:1:finished", "http://a/x", "j", "{}", NOW).unwrap());
        assert!(s.enqueue_notification("j:1:started", "http://b/y", "j", "{}", NOW).unwrap());
        let due = s.due_notifications(NOW).unwrap();
        assert_eq!(due.iter().map(|m| m.url.as_str()).collect::<Vec<_>>(), ["http://a/x", "http://b/y"]);
        let (first, b) = (due[0].id, due[1].id);
        let ids = |at| s.due_notifications(at).unwrap().iter().map(|m| m.id).collect::<Vec<_>>();

        // A claim is one process's; a failure waits for its backoff and keeps the later ones behind it.
        assert!(s.claim_notification(first, NOW, NOW + 60).unwrap());
        assert!(!s.claim_notification(first, NOW, NOW + 60).unwrap());
        s.notification_failed(first, "HTTP 500", Some(NOW + 5), NOW).unwrap();
        assert_eq!(ids(NOW), [b]);
        let again = s.due_notifications(NOW + 5).unwrap();
        assert_eq!((again[0].id, again[0].tries), (first, 1));
        s.notification_delivered(first, NOW + 5).unwrap();
        assert!(!s.claim_notification(first, NOW + 100, NOW + 160).unwrap(), "a delivered message is never sent again");
        let next = ids(NOW + 5);
        assert_eq!((next.len(), next[1]), (2, b));
        assert!(next[0] > first && next[0] != b, "then the webhook's second message");

        // Given up: the next one is due.
        s.notification_failed(next[0], "HTTP 404", None, NOW + 6).unwrap();
        assert_eq!(ids(NOW + 6), [b]);
    }}

    both! { fn cursors_are_per_monitor(place) {
        let s = place.open();
        assert_eq!(s.notify_cursor("monitor:").unwrap(), None);
        s.set_notify_cursor("monitor:", 7).unwrap();
        s.set_notify_cursor("monitor:", 9).unwrap();
        assert_eq!((s.notify_cursor("monitor:").unwrap(), s.notify_cursor("monitor:b").unwrap()), (Some(9), None));
    }}
}
