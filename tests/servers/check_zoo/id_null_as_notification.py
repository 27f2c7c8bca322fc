"""Bug: a request with "id": null is treated as a notification and never answered."""

from reference import Server


class Buggy(Server):
    def is_notification(self, msg):
        return msg.get("id") is None


if __name__ == "__main__":
    Buggy().serve()
