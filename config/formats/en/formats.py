"""Dates as the console writes them (jobs/console/moments.py): day, short month, year, 24-hour
time. Django uses these wherever it renders a date itself: read-only fields, the lists of
apps that bring their own admin."""

DATE_FORMAT = "j M Y"
TIME_FORMAT = "H:i"
DATETIME_FORMAT = "j M Y H:i"
SHORT_DATE_FORMAT = "j M Y"
SHORT_DATETIME_FORMAT = "j M Y H:i"
