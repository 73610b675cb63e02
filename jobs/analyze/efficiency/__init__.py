"""How close an op runs to its device: FLOPs and bytes from the recorded shapes (:mod:`.perf_model`), the device's
datasheet peaks and the roofline (:mod:`.devices`)."""
