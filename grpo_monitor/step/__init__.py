"""What the monitor does with one step, in the order it happens (private to :mod:`grpo_monitor.monitor`).

1. :mod:`.inputs`: the public boundary; a user's mistake raises here, before anything is guarded;
   :mod:`.observe` turns each observe call's checked arguments into what the accumulator keeps;
2. :mod:`.accumulator`: device-side sums of each observe call, no host sync;
3. :mod:`.sync` (over :mod:`.distributed`): one collective and one host copy into a frozen ``SyncedStep``;
4. :mod:`.evaluate` (over :mod:`.checks`, :mod:`.weights`, :mod:`.declared`): pure; the synced step's
   violations, the estimator judgement, the narrowed estimator lock, notes and loss-weight metrics, as one
   ``Verdict`` (the monitor's ``_apply`` is the one place any of it changes state);
5. :mod:`.metrics`: pure; the synced step's metric values and its ``StepReport``;
6. :mod:`.guard`: fail-open for the monitor's own faults around every public call, through the monitor's
   ``Gate`` (its lock, closed state and faults: no private member of the monitor is read); :mod:`.policy`: what a
   violation does under ``on_violation`` (raise, warn, nothing);
7. :mod:`.weights`: the loss's token weights (rows kept per step, summarised after the sync).

What crosses steps lives in :mod:`grpo_monitor.run`.
"""
