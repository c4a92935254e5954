from tests.support.push.fixtures import live_push, push_servers  # noqa: F401 - fixtures
