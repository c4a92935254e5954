from tests.support.push.fixtures import live_push, outbox, push_servers  # noqa: F401 - fixtures
