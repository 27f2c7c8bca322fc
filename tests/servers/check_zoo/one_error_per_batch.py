"""Bug: one invalid element fails the whole batch with a single -32600 (no per-element errors)."""

from reference import Invalid, Server


class Buggy(Server):
    def handle_batch(self, batch):
        try:
            for m in batch:
                if not self.is_response(m):
                    self.check_request(m)
        except Invalid:
            self.write(self.error(-32600, "Invalid Request"))
            return
        super().handle_batch(batch)


if __name__ == "__main__":
    Buggy().serve()
