"""The per-rank trace model every analysis reads (as HTA's ``Trace``): typed numpy columns of one capture.

Also HTA's loading rules, kernel types and host launch names, which decide how an event is typed.
"""
