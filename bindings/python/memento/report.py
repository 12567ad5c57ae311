"""RestoreReport: what Checkpointer.restore() brought back, and from where."""


class RestoreReport(int):
    """What restore() brought back. It is the int step (an int subclass: range(start, n),
    start + 1, start < n, "%d" % start, f"{start:d}" all work), and always true (a report of
    step 0 too: restore() returns None when there is nothing to restore).

    Attributes: step, version, summary (one short line: the version, this rank's entries
    counted per source, the lost nodes, "elastic", the seconds restore() took; as repr()
    shows it), entries (list of {name, bytes, crc, source}),
    lost_nodes, source_detail, bytes_sent, bytes_received, reprotect_mode,
    protection ("protected"; "re-protecting": what the lost nodes held is
    rebuilt in the background, see Checkpointer.protection_state();
    "unprotected": a blocking re-protect failed, until the next save commits),
    inventory_s, plan_s, transfer_s, reprotect_s, elastic (restored onto another
    topology), elastic_plan, notes (why newer versions were passed over), json (the
    engine's recovery report). to_dict() has them all.
    """

    def __new__(cls, d):
        return super().__new__(cls, int(d["step"]))

    def __init__(self, d):
        self._d = dict(d)
        # The engine's report as JSON: a str, or a function that makes it (on first use).
        self._json = self._d.pop("json", None)
        for k, v in self._d.items():
            setattr(self, k, v)

    @property
    def json(self):
        if callable(self._json):
            self._json = self._json()
        return self._json

    def to_dict(self):
        d = dict(self._d)
        if self._json is not None:
            d["json"] = self.json
        return d

    def sources(self):
        """{entry name: source} ("local-memory", "replica", "decode", "remote")."""
        return {e["name"]: e["source"] for e in self.entries}

    def __bool__(self):
        return True

    def __eq__(self, other):
        if isinstance(other, RestoreReport):
            return other.to_dict() == self.to_dict()
        return int(self) == other

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return int.__hash__(self)

    def __reduce__(self):
        return (RestoreReport, (self.to_dict(),))

    def __repr__(self):
        return "RestoreReport(%s)" % self.summary
