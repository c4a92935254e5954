"""Email: registered templates, delivery records with exactly-one-send, sending through
Django's email framework (SMTP, or an HTTP provider through django-anymail), the job that
sends, and the transactional email API."""
