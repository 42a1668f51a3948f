"""json_results — an Ansible stdout callback for test_systemd_fleet.py: every task's result per
host, as one JSON document at the end of the run ({"plays": [{"tasks": [{"task": {"name"},
"hosts": {HOST: RESULT}}]}], "stats": {HOST: {ok, changed, failures, ...}}}), the shape of
ansible.posix's json callback, which ansible-core does not ship."""

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
    name: json_results
    type: stdout
    short_description: every task's results as one JSON document
    description: the results of every task, for tests to read
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'json_results'

    def __init__(self):
        super().__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({'play': {'name': play.get_name()}, 'tasks': []})

    def _task(self, task):
        self.plays[-1]['tasks'].append({'task': {'name': task.get_name()}, 'hosts': {}})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._task(task)

    def _result(self, result, **extra):
        r = dict(self._clean_results(result._result, result._task.action) or result._result, **extra)
        self.plays[-1]['tasks'][-1]['hosts'][result._host.get_name()] = r

    def v2_runner_on_ok(self, result, **kw):
        self._result(result)

    def v2_runner_on_failed(self, result, ignore_errors=False, **kw):
        self._result(result, failed=True)

    def v2_runner_on_skipped(self, result, **kw):
        self._result(result, skipped=True)

    def v2_runner_on_unreachable(self, result, **kw):
        self._result(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        hosts = {h: stats.summarize(h) for h in sorted(stats.processed)}
        self._display.display(json.dumps({'plays': self.plays, 'stats': hosts}, default=str))
