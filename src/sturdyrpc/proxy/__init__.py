"""Proxies between a real client and a real stdio server: ``trace`` (see), ``guard`` (repair) and
``replay`` (re-run). The decisions are sans-I/O (:mod:`.monitor`, :mod:`.guard`, :mod:`.replay`);
:mod:`.process` and :mod:`.pump` are the thin layer of pipes and processes under them."""
