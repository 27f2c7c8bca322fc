"""Bug: answers unknown methods with -32000 "Server error" instead of -32601."""

from reference import Server


class Buggy(Server):
    def unknown_method(self, msg):
        return self.error(-32000, "Server error", self.read_id(msg))


if __name__ == "__main__":
    Buggy().serve()
