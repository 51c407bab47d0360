"""Session fixtures shared by the suite: a real redis-server and the platform sandbox, both as subprocesses."""
