"""Bug: echoes the id "7" as 7 (numeric strings are coerced to integers, like a lax union type)."""

from reference import Server


class Buggy(Server):
    def read_id(self, msg):
        id = msg["id"]
        if isinstance(id, str) and id.isdigit():
            return int(id)
        return id


if __name__ == "__main__":
    Buggy().serve()
