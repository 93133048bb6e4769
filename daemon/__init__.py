"""kbatchd, the process: command line, configuration, supervisor, cluster I/O, reconcilers,
placement and the simulated cluster."""
