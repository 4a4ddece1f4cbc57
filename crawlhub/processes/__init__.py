"""The processes crawlhub runs and watches: the embedded Redis (launcher.py), the group that
`up` and `worker` start and supervise (process_group.py), the RQ worker class (rqworker.py),
what the Workers page reads of them (workers.py) and their routine log lines folded
(quiet_logs.py)."""
