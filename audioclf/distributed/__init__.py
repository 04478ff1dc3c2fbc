"""More than one process: TF_CONFIG clusters, a launcher to try them on one host, tf.data service servers.

  cluster.py    the task TF_CONFIG names (Task, current_task) and loopback cluster specs
  launcher.py   Cluster: one process per task on this host, their output prefixed
  servers.py    tf.data service dispatcher and worker servers, served until a signal
"""
