import pytest

from server_harness import Server


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.stderr_lines)
