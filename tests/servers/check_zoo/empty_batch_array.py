"""Bug: answers [] with [] (an empty batch is answered with an empty array, not one -32600)."""

from reference import Server


class Buggy(Server):
    def handle_batch(self, batch):
        if not batch:
            self.write([])
            return
        super().handle_batch(batch)


if __name__ == "__main__":
    Buggy().serve()
