-- Claim one delivery for sending and read what the request needs, in one statement.
--
-- Claimable: pending, or held by a run whose claim has lapsed (it died mid-send), with
-- its device active and its notification not expired. No row back means the delivery is
-- finished, held, gone, or not sendable now; the caller reads it to find out which.
UPDATE notifications_push_delivery d
SET status = 'sending',
    sending_until = %(until)s,
    last_attempt_at = %(now)s,
    attempts = d.attempts + 1
FROM notifications_push_notification n, notifications_push_device v
WHERE d.id = %(id)s
  AND n.id = d.notification_id
  AND v.id = d.device_id
  AND v.active
  AND (n.expires_at IS NULL OR n.expires_at > %(now)s)
  AND (d.status = 'pending' OR (d.status = 'sending' AND d.sending_until < %(now)s))
RETURNING d.platform, v.id, v.token, v.app_id, n.title, n.body, n.data, n.collapse_key, n.expires_at
