"""Bug: ids 0 and "" are taken for "no id" (a truthiness test), so those requests are never answered."""

from reference import Server


class Buggy(Server):
    def is_notification(self, msg):
        # meant as "no id", but 0 and "" are falsy too (null is handled right)
        return "id" not in msg or (msg["id"] is not None and not msg["id"])


if __name__ == "__main__":
    Buggy().serve()
