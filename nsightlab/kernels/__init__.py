"""Where a kernel is judged: Nsight Compute reports read as answers.

- ``judge``: each profiled kernel's limiter (Speed of Light), roofline and headroom, occupancy,
  and NVIDIA's rule results kept and weighed (``judge.of(store)``);
- ``peaks``: the device's ceilings, from the report's own metrics, else a small table;
- ``join``: profiled kernels matched to the trace's loop: what each could save per iteration,
  and the loop's top kernels that ncu did not profile;
- ``pairs``: two reports compared at the counter level (a precision change, kernel by kernel).

``run.report``, ``comparison`` and the renderers read these; findings are records
(``renderers.words``), worded where they are shown.
"""
