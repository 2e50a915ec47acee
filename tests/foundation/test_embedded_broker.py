"""The embedded broker never hands a consumer a message half written."""

import threading
from queue import Empty

from kombu import Connection

from project.broker import FilesystemTransport

MESSAGES = 2000


def test_a_consumer_polling_while_messages_are_written_reads_each_whole(tmp_path):
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(tmp_path),
        "store_processed": False,
    }
    body = {"job": "x" * 20_000}  # long enough that a write is not one instant
    received, errors = [], []

    def consume() -> None:
        with Connection(transport=FilesystemTransport, transport_options=options) as conn:
            channel = conn.default_channel
            while len(received) < MESSAGES and not errors:
                try:
                    message = channel._get("default")
                except Empty:
                    continue
                except Exception as exc:  # noqa: BLE001 - what a worker would die of
                    errors.append(exc)
                    return
                received.append(message["body"] == body)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    with Connection(transport=FilesystemTransport, transport_options=options) as conn:
        channel = conn.default_channel
        for _ in range(MESSAGES):
            channel._put("default", {"body": body})
    consumer.join(timeout=120)
    assert errors == []
    assert received == [True] * MESSAGES
    assert not list(folder.glob("*.part"))  # every message was renamed into place
