"""Shared HTTP plumbing for the apps' JSON APIs and pages: ``jsonapi`` (reading bodies,
error shapes, the middleware that answers API errors as JSON), ``authentication`` (what a
request's bearer token turned out to be) and ``clientip`` (the client's address behind the
configured proxies). It imports no app: accounts, notifications and reports all use it
without importing each other."""
