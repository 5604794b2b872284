"""The cluster fabric on loopback: replication, data-plane latency, failover, join.

Four sections, each against a peer measured in the same run:

* ``replication``: a master and three followers (four daemons, explicit peers, one
  cluster key). Card commands (``POST /models/add-card`` then ``DELETE
  /models/custom/...``, one event each) are driven by ``--concurrency`` workers
  through the master's API, through the followers' APIs (forwarded to the master),
  and through all four. Every node's ``lastEventAppliedIdx`` is sampled in rounds
  (one ``/v1/diagnostics/node`` request per node per round, all at once): events/s
  indexed by the master and applied by each follower, the replication lag (from
  the round the master shows index i to the round every follower shows it;
  resolution one round), the backlog (how many events the slowest follower is
  behind in a round; not quantized), and each process's CPU per event. Lone-event
  probes then time single commands on a quiet cluster with tight polling. Peer:
  the same load on a lone daemon (a cluster of one), before and after.
* ``dataplane``: in-process, two ``FabricTransport``\\ s (real CURVE sockets, keys
  from ``derive_curve_keys``, the ZAP handler) ping-pong real data-plane envelopes
  (``encode(Header(plane="data"), DataFrame)``, decoded on receipt as the cluster
  agent does). Peer: raw pyzmq ROUTER/DEALER pairs on loopback, no CURVE, no
  envelope, same socket layout, same event loop; in between, the same transports
  without the envelope, and raw pyzmq with CURVE. Blocks alternate ABBA.
* ``failover``: three daemons, the demo model placed on a follower; SIGKILL the
  master; time until every survivor reports the same new master, until a chat
  request to the node hosting the instance answers 200 (target: < 10 s), and until
  a State command through that node (``add-card``) answers 200. The killed node is
  restarted (same identity) before the next repetition. Peer: the election's own
  window (master timeout and campaign) and a chat just before the kill.
* ``join``: fresh nodes started with ``--peer`` (a follower), one after another,
  join the cluster left by ``replication`` (a few hundred events of history):
  time from spawn until every other node's topology has it, until its API
  answers, until its own topology is complete, and until its
  ``lastEventAppliedIdx`` equals the master's. Peer: a lone daemon's time from
  spawn to its API answering.

HTTP goes through :class:`~bench.fabric._http.QuickHttp`, not httpx: see its docstring
(far less client CPU on a machine the daemons share).

One module per section (``_replication``, ``_dataplane``, ``_failover``, ``_join``), on
the harness in ``_cluster`` and ``_http``; ``_report`` prints the tables and ``_run``
is the command line. Run from the repository root::

    .venv/bin/python -m bench.fabric [--sections replication dataplane failover join] [--json]
"""

from __future__ import annotations

from bench.fabric._run import SECTIONS, main

__all__ = ["SECTIONS", "main"]
