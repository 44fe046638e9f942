"""The NAPI poll loop of the numba GRO engine (net/core/dev.c): ``__napi_poll`` with its
budget, ``napi_complete_done`` (gro_flush_timeout, napi_defer_hard_irqs), the
``napi_watchdog`` timer, and the batch models (ideal, napi, explicit poll windows) of
docs/gro-model.md.

Layer: gro/fast, the top of the package: :func:`run` is the GRO kernel engine.py calls
per batch; it drives ``dev._receive`` and ``dev._flush_queue``.
"""

from __future__ import annotations

import numba
import numpy as np

from gropcap.gro.fast.dev import _flush_queue, _held_any, _receive
from gropcap.gro.fast.state import (
    MODEL_IDEAL, MODEL_NAPI, MODEL_WINDOWS, QS_CONT, QS_CONT_T, QS_DEFER, QS_HAS_TIMER,
    QS_LAST_POLL, QS_LAST_TIME, QS_MASKED, QS_NEXT, QS_TIMER,
)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _jiffy(t, hz):
    # t * hz // 1e9 without the int64 overflow of t * hz (epoch nanoseconds times HZ
    # passes 2**63): floor division splits exactly, as the reference's Python ints
    return (t // 1000000000) * hz + ((t % 1000000000) * hz) // 1000000000


@numba.njit(cache=True, nogil=True, _nrt=False)
def _take_gap(arr, j, hi, start, budget, gap):
    """Packets from j on: each joins while it arrives within ``gap`` of the previous one
    (or of the poll start, for packets already waiting), up to ``budget``."""
    # the previous packet's time carried, unsigned positions (no wraparound code): the
    # loop runs once per packet of a napi-model run (callgrind: 26 -> 9 instructions)
    end = np.uint64(min(hi, j + budget))
    k = np.uint64(j + 1)
    last = arr[np.uint64(j)]
    while k < end:
        a = arr[k]
        if a > max(last, start) + gap:
            break
        last = a
        k += np.uint64(1)
    return np.int64(k) - j


@numba.njit(cache=True, nogil=True, _nrt=False)
def _take_until(arr, j, hi, until, budget):
    """Packets from j on that arrived by ``until``, at most ``budget``."""
    cnt = 0
    while cnt < budget and j + cnt < hi and arr[j + cnt] <= until:
        cnt += 1
    return cnt


@numba.njit(cache=True, nogil=True, _nrt=False)
def run(c, cfg, st, out, rows, qstart, arr, p_time, p_queue, final, udp):
    """Run GRO over one batch in the configured batch model (one ``dev._receive`` site, so
    the rule code is compiled once).

    ``rows[qstart[q]:qstart[q+1]]``: packets of queue q in row order (ideal and explicit
    windows: one "queue" holding every packet in row order); ``arr``: their arrival
    times (running maximum of ts_ns within the queue).

    * ideal: every packet in row order, one unlimited table, no polls (the end-of-capture
      flush is :func:`dev.flush_ideal`).
    * explicit windows (kernel replay): each run of equal ``poll_win`` values is one
      window; its end flushes all queues (END_POLL). A window still open at the end of a
      non-final batch stays open (``st.win``).
    * napi, polls inferred (docs/gro-model.md "NAPI polls"): mirrors ``__napi_poll``
      (full budget: flush all if HZ < 1000, else old entries; poll again at once) and
      ``napi_complete_done`` (gro_flush_timeout / napi_defer_hard_irqs; before v4.20 no
      flush when the timer is armed) and ``napi_watchdog`` (before v5.7 no poll when
      nothing is held). Streaming:
      unless ``final``, a queue stops before any decision that depends on packets not
      given yet (a poll that could still grow, a timer racing the next arrival) and
      records in ``st.qs[q, QS_NEXT]`` the first position it did not process; the caller
      passes those packets again with the next batch. A queue also stops when ``p_time``
      is nearly full. Polls are numbered globally (``st.ctr[2]``); their time and queue
      go to ``p_time``/``p_queue`` (index = number - first number of this call).

    ``udp``: ``None`` when no packet of ``c`` enters UDP GRO (``c.udp`` all 0), else
    ``np.bool_(True)``. Two compiled variants, chosen by the argument's type: numba
    prunes ``if udp is not None`` in :func:`dev._receive` before typing, so the ``None``
    variant (what a TCP-only configuration compiles on a first run) has no UDP rules in
    it (:func:`udp._udp_receive` was 2.8 s of the first run's 42 s CPU).

    Returns the number of polls recorded (napi), else 0.
    """
    base = st.ctr[2]
    cap = p_time.shape[0]
    budget = cfg.budget
    gap = cfg.gap_ns
    T = cfg.timeout_ns
    napi = cfg.model == MODEL_NAPI
    nq = cfg.queues if napi else 1
    qs = st.qs
    for q in range(nq):
        lo = qstart[q]
        hi = qstart[q + 1]
        j = lo
        while True:
            # --- the next run of packets [j, j + cnt) to receive, and its poll
            was_timer = False
            poll = -1
            jf = 0
            cnt = 0
            now = 0
            if cfg.model == MODEL_IDEAL:
                if j >= hi:
                    break
                cnt = hi - j
            elif cfg.model == MODEL_WINDOWS:
                if j >= hi:
                    break
                w = c.poll_win[rows[j]]
                if st.win[1] != 0 and w != st.win[0]:
                    for fq in range(cfg.queues):
                        _flush_queue(fq, st, out, st.win[2], np.bool_(False), np.int64(0))
                    st.win[2] += 1
                    st.win[1] = 0
                st.win[0] = w
                st.win[1] = 1
                cnt = 1
                while j + cnt < hi and c.poll_win[rows[j + cnt]] == w:
                    cnt += 1
                poll = st.win[2]
            else:
                if st.ctr[2] - base + 2 > cap:
                    break                   # poll buffer full: resume in the next call
                cont = qs[q, QS_CONT]
                if cont != 0:
                    if j >= hi:
                        if final:
                            qs[q, QS_CONT] = 0
                        break
                    cont_t = qs[q, QS_CONT_T]
                    if cont == 2 and arr[j] <= cont_t:
                        cnt = _take_until(arr, j, hi, cont_t, budget)
                        if cnt < budget and j + cnt >= hi and not final:
                            break           # more packets may have arrived by cont_t
                        now = cont_t
                        was_timer = True
                    else:
                        start = max(arr[j], cont_t)
                        cnt = _take_gap(arr, j, hi, start, budget, gap)
                        if cnt < budget and j + cnt >= hi and not final:
                            break           # the poll could still grow
                        now = max(start, arr[j + cnt - 1])
                    qs[q, QS_CONT] = 0
                elif qs[q, QS_HAS_TIMER] != 0 and (qs[q, QS_MASKED] != 0 or j >= hi
                                                   or arr[j] >= qs[q, QS_TIMER]):
                    if j >= hi and not final:
                        break               # the next arrival may come before the timer
                    now = qs[q, QS_TIMER]
                    cnt = _take_until(arr, j, hi, now, budget)
                    if cnt < budget and j + cnt >= hi and not final:
                        break               # more packets may have arrived by the timer
                    qs[q, QS_HAS_TIMER] = 0
                    was_timer = True
                    if cnt == 0:
                        if not cfg.watchdog_empty and not _held_any(q, st):
                            # napi_watchdog before v5.7: `if (napi->gro_bitmask && ...)`
                            qs[q, QS_MASKED] = 0
                            continue
                        # timer poll without work: no reload of the defer counter
                        poll = st.ctr[2]
                        st.ctr[2] += 1
                        p_time[poll - base] = now
                        p_queue[poll - base] = q
                        qs[q, QS_LAST_POLL] = poll
                        qs[q, QS_LAST_TIME] = now
                        jf = _jiffy(now, cfg.hz)
                        if qs[q, QS_DEFER] > 0:
                            qs[q, QS_DEFER] -= 1
                            _flush_queue(q, st, out, poll, np.bool_(True), jf)
                            qs[q, QS_TIMER] = now + T
                            qs[q, QS_HAS_TIMER] = 1
                        else:
                            _flush_queue(q, st, out, poll, np.bool_(False), jf)
                            qs[q, QS_MASKED] = 0
                        continue
                else:
                    if j >= hi:
                        break
                    cnt = _take_gap(arr, j, hi, arr[j], budget, gap)
                    if cnt < budget and j + cnt >= hi and not final:
                        break               # the poll could still grow
                    qs[q, QS_HAS_TIMER] = 0  # an interrupt-driven poll replaces the timer
                    now = arr[j + cnt - 1]
                poll = st.ctr[2]
                st.ctr[2] += 1
                p_time[poll - base] = now
                p_queue[poll - base] = q
                qs[q, QS_LAST_POLL] = poll
                qs[q, QS_LAST_TIME] = now
                jf = _jiffy(now, cfg.hz)
            # --- dev_gro_receive for each packet of the run
            _receive(rows, j, j + cnt, c, cfg, st, out, poll, jf, udp)
            j += cnt
            if not napi:
                continue
            if cnt == budget:
                # __napi_poll: "Flush too old packets. If HZ < 1000, flush all packets."
                if cfg.hz < 1000:
                    _flush_queue(q, st, out, poll, np.bool_(False), jf)
                else:
                    _flush_queue(q, st, out, poll, np.bool_(True), jf)
                qs[q, QS_CONT] = 2 if was_timer else 1
                qs[q, QS_CONT_T] = now
                continue
            # napi_complete_done(work > 0)
            timeout = T if _held_any(q, st) else 0
            defer = cfg.defer
            if defer > 0:
                defer -= 1
                timeout = T
                qs[q, QS_MASKED] = 1 if timeout != 0 else 0
            else:
                qs[q, QS_MASKED] = 0
            qs[q, QS_DEFER] = defer
            if timeout == 0 or cfg.timer_flush_old:
                # napi_gro_flush(n, !!timeout) (v4.20); before 605108acfe62 a poll that
                # armed the timer flushed nothing
                _flush_queue(q, st, out, poll, timeout != 0, jf)
            if timeout != 0:
                qs[q, QS_TIMER] = now + timeout
                qs[q, QS_HAS_TIMER] = 1
            else:
                qs[q, QS_HAS_TIMER] = 0
        qs[q, QS_NEXT] = j
    if cfg.model == MODEL_WINDOWS and final and st.win[1] != 0:
        for fq in range(cfg.queues):
            _flush_queue(fq, st, out, st.win[2], np.bool_(False), np.int64(0))
        st.win[1] = 0
        st.win[2] += 1
    return st.ctr[2] - base


def napi_finish(st, out):
    """End of capture (after a final napi-model run): what is still held goes up with
    END_POLL in its queue's last poll. A Python loop over the queues calling the
    ``dev._flush_queue`` that ``run`` compiled (same argument types): nothing more to
    compile."""
    for q in range(st.qs.shape[0]):
        poll = st.qs[q, QS_LAST_POLL]
        if poll >= 0 and np.any(st.tcnt[q] > 0):
            _flush_queue(np.int64(q), st, out, np.int64(poll), np.bool_(False), np.int64(0))
