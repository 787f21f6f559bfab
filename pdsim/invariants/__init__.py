"""Engine invariants, checked after every SimPy event in the tests.

``run_checked(cfg)`` runs a simulation one event at a time (``Simulation.step``) and,
after each event, checks every invariant below; the first violation raises
``InvariantViolation`` naming the instance, the request and the simulated time. This
package is the only code that reads engine internals for checking (``checks``: the
invariants that need no history; ``checker``: the stateful ones and the driver, which
watches the engine through its hooks), so an engine refactoring updates it alone.

Invariants (after every event):

1. **KV block accounting** (per instance): used + free blocks = total; no block is in two
   block tables or both owned and free; no block is freed twice (``BlockPool.free`` raises
   on it, and the driver counts frees per request).
2. **Blocks have owners**: every block table belongs to a request that instance holds
   (waiting, receiving, running or pinned for a transfer); a request that finished,
   failed or was rejected holds no blocks anywhere; an instance that is down holds no
   request and no block.
3. **KV covers the computation**: a running request holds at least the blocks for the
   tokens it has computed (prefill) or its context (decode); the decode rows (request of
   each row, its block count) agree with the block pool and with the running list.
4. **P frees a request's blocks exactly once** after its prefill ends (D read them, the
   lease expired, the transfer failed or an instance went down): never twice, and by the
   end of the run exactly once per attempt that finished its prefill.
5. **D never computes on KV it does not have**: a request enters a D instance's batch
   either with nothing computed (local recompute) or with its remote KV landed (its
   hand-over record, ``HandOver``, has ``kv_landed_s`` set, not in the future, and
   names this D) and no more tokens computed than it loaded (the record's
   ``kv_tokens``); nothing in the batch is still waiting for remote KV. The record of
   the current attempt agrees with the request (its P, pin time, D and queue time), a
   load that landed counts the bytes P's layout gives and never also failed, and a P
   pins only requests whose record names it. The hand-over's facts are read from the
   record the proxy and the KV transfers write, never from the request's working fields.
6. **Per-request timestamps are ordered** (those that are set): arrival <= p_queued <=
   p_start <= p_end <= d_queued <= transfer_start <= transfer_end <= first_token <=
   finish; none is later than the end of a step an instance has already committed; once
   set a timestamp never changes (a retry after an instance outage starts a new attempt,
   which resets the per-hop timestamps but not arrival, first token or finish).
7. **Speculative counters**: per request and per decode row, accepted <= drafted at
   every position (``accepted_per_pos[i] <= num_drafts``), the per-position counts are
   non-increasing and sum to the accepted tokens, draft tokens = drafts x N, and output
   tokens never exceed the target (a finished request has exactly its target).
8. **Request conservation**: every request that has arrived is finished, failed,
   rejected, or in flight in exactly one instance's queue (waiting, receiving or
   running), never two; arrived = finished + failed + rejected + in flight, and the
   simulation's done counter equals finished + failed + rejected. No request whose
   arrival time has passed is still undispatched (open-loop workloads).
9. **Closed loops**: requests are released in order, and the k-th release (k >= C, the
   concurrency) comes no earlier than the (k - C)-th request ended.
10. **Liveness**: while requests are in flight the event queue is never empty (no
    deadlock), and the run ends with every request finished, failed or rejected and
    every KV pool empty.
"""

from pdsim.invariants.checker import InvariantChecker, run_checked
from pdsim.invariants.checks import TIMESTAMP_ORDER, InvariantViolation, check_invariants

__all__ = ["TIMESTAMP_ORDER", "InvariantChecker", "InvariantViolation", "check_invariants",
           "run_checked"]
