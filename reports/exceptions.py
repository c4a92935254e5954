"""The reports app's errors."""


class ReportsError(Exception):
    """Base of the reports app's errors."""


class BadUpload(ReportsError):
    """An uploaded file that cannot be imported (size, encoding, header): nothing is kept."""


class BadReportRequest(ReportsError):
    """A report request with an unknown kind or bad parameters."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class UnknownCountry(ReportsError):
    """Text that is not the name or code of an ISO 3166 country."""


class ReportNotAllowed(ReportsError):
    """A report kind the caller may not run (staff only)."""
