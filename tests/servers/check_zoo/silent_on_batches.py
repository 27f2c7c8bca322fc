"""Bug: silent on batches (any top-level array is dropped without a reply)."""

from reference import Server


class Buggy(Server):
    def handle_batch(self, batch):
        return None


if __name__ == "__main__":
    Buggy().serve()
