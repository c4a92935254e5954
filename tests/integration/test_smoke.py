import pytest

from tests.tasks import basic


@pytest.mark.django_db
def test_enqueue_returns_ready_result() -> None:
    result = basic.add.enqueue(1, 2)
    assert result.status == "READY"
    assert basic.add.get_result(result.id).args == [1, 2]
