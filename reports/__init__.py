"""Reports and imports: long jobs with live progress and files to download."""
