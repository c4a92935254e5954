from tests.support.push.fixtures import push_servers  # noqa: F401 - fixtures
