import { describe, expect, it } from "vitest";
import {
  addMetrics,
  ec2CallsByAction,
  parseMetrics,
  pollsDone,
  vnodeLatencies,
} from "./metrics.js";

const TEXT = `# HELP nebula_vnode_ec2_calls_total EC2 API calls by action and outcome
# TYPE nebula_vnode_ec2_calls_total counter
nebula_vnode_ec2_calls_total{action="DescribeInstances",outcome="ok"} 40
nebula_vnode_ec2_calls_total{action="RunInstances",outcome="ok"} 12
nebula_vnode_ec2_calls_total{action="StopInstances",outcome="IncorrectInstanceState"} 1
nebula_vnode_ec2_calls_total{action="StopInstances",outcome="ok"} 3
nebula_vnode_exit_to_status_seconds_bucket{le="0.5"} 0
nebula_vnode_exit_to_status_seconds_sum 12.5
nebula_vnode_exit_to_status_seconds_count 5
nebula_vnode_terminal_to_terminated_seconds_sum 0
nebula_vnode_terminal_to_terminated_seconds_count 0
nebula_vnode_terminal_to_terminate_seconds_sum 3
nebula_vnode_terminal_to_terminate_seconds_count 2
nebula_vnode_event_to_status_seconds_sum 2
nebula_vnode_event_to_status_seconds_count 4
nebula_vnode_event_stage_seconds_bucket{le="0.1",stage="delivery"} 1
nebula_vnode_event_stage_seconds_sum{stage="delivery"} 1
nebula_vnode_event_stage_seconds_count{stage="delivery"} 4
nebula_vnode_event_stage_seconds_sum{stage="read"} 0.2
nebula_vnode_event_stage_seconds_count{stage="read"} 1
nebula_vnode_startup_seconds_sum 60
nebula_vnode_startup_seconds_count 3
nebula_vnode_startup_phase_seconds_sum{phase="boot"} 6
nebula_vnode_startup_phase_seconds_count{phase="boot"} 3
nebula_vnode_startup_phase_seconds_sum{phase="pull"} 30
nebula_vnode_startup_phase_seconds_count{phase="pull"} 2
garbage line
`;

describe("vnode metrics", () => {
  it("parses series values and skips comments and junk", () => {
    const metrics = parseMetrics(TEXT);
    expect(metrics.get("nebula_vnode_exit_to_status_seconds_count")).toBe(5);
    expect(metrics.has("garbage")).toBe(false);
  });

  it("sums EC2 calls per action over outcomes", () => {
    expect(ec2CallsByAction(parseMetrics(TEXT))).toEqual({
      DescribeInstances: 40,
      RunInstances: 12,
      StopInstances: 4,
    });
  });

  it("reads the histograms as means; none without samples", () => {
    const none = { count: 0, meanSeconds: null };
    expect(vnodeLatencies(parseMetrics(TEXT))).toEqual({
      exitToStatus: { count: 5, meanSeconds: 2.5 },
      terminalToTerminated: none,
      terminalToTerminate: { count: 2, meanSeconds: 1.5 },
      eventToStatus: { count: 4, meanSeconds: 0.5 },
      stages: {
        host: none,
        delivery: { count: 4, meanSeconds: 0.25 },
        wait: none,
        read: { count: 1, meanSeconds: 0.2 },
        publish: none,
      },
      startup: { count: 3, meanSeconds: 20 },
      startupPhases: {
        schedule: none,
        admit: none,
        launch: none,
        boot: { count: 3, meanSeconds: 2 },
        pull: { count: 2, meanSeconds: 15 },
        start: none,
        ready: none,
      },
      startupByStart: { warm: none, cold: none },
    });
    expect(vnodeLatencies(new Map()).exitToStatus).toEqual({ count: 0, meanSeconds: null });
  });

  it("sums over labels it does not ask for, and splits the start-up by its start label", () => {
    const labelled = parseMetrics(`nebula_vnode_startup_seconds_sum{start="warm"} 8
nebula_vnode_startup_seconds_count{start="warm"} 2
nebula_vnode_startup_seconds_sum{start="cold"} 30
nebula_vnode_startup_seconds_count{start="cold"} 1
nebula_vnode_startup_phase_seconds_sum{phase="boot",start="warm"} 2
nebula_vnode_startup_phase_seconds_count{phase="boot",start="warm"} 2
nebula_vnode_startup_phase_seconds_sum{start="cold",phase="boot"} 20
nebula_vnode_startup_phase_seconds_count{start="cold",phase="boot"} 1
nebula_vnode_startup_phase_seconds_bucket{le="5",phase="boot",start="cold"} 0
`);
    const read = vnodeLatencies(labelled);
    expect(read.startup).toEqual({ count: 3, meanSeconds: 38 / 3 });
    expect(read.startupPhases.boot).toEqual({ count: 3, meanSeconds: 22 / 3 });
    expect(read.startupByStart).toEqual({
      warm: { count: 2, meanSeconds: 4 },
      cold: { count: 1, meanSeconds: 30 },
    });
  });

  it("counts polls over outcomes, and adds two scrapes of a restarted app", () => {
    const first = parseMetrics(`nebula_vnode_poll_duration_seconds_count{outcome="ok"} 7
nebula_vnode_poll_duration_seconds_count{outcome="error"} 1
nebula_vnode_startup_seconds_sum 10
nebula_vnode_startup_seconds_count 2
`);
    expect(pollsDone(first)).toBe(8);
    const second = parseMetrics(`nebula_vnode_poll_duration_seconds_count{outcome="ok"} 3
nebula_vnode_startup_seconds_sum 5
nebula_vnode_startup_seconds_count 1
`);
    const both = addMetrics(first, second);
    expect(pollsDone(both)).toBe(11);
    expect(vnodeLatencies(both).startup).toEqual({ count: 3, meanSeconds: 5 });
  });
});
