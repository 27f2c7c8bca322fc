"""Bug: answers notifications (an unknown-method notification gets a -32601 reply)."""

from reference import Server


class Buggy(Server):
    def is_notification(self, msg):
        return False  # every message with a method is treated as a request

    def read_id(self, msg):
        return msg.get("id")


if __name__ == "__main__":
    Buggy().serve()
