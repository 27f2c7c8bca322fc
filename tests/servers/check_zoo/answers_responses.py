"""Bug: answers a response object sent to it with -32600 (a reply to a reply can loop forever)."""

from reference import Server


class Buggy(Server):
    def is_response(self, msg):
        return False


if __name__ == "__main__":
    Buggy().serve()
