//! `cargo test`: kpurgatory's timer vectors against the `hierarchical_hash_wheel_timer` crate's cancellable
//! four-level wheel, driven tick by tick (`KPURGATORY_BINDING=stdio` runs the driver's stdio binding instead).

use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use hierarchical_hash_wheel_timer::wheels::Skip;
use hierarchical_hash_wheel_timer::{IdOnlyTimerEntry, TimerError};
use kpurgatory_vectors::{json, Binding, Params, Rejected, Timer, TimerBinding, Unrunnable};
use std::collections::BTreeSet;
use std::time::Duration;

/// Rounds of skip-or-tick one advance may take: two per 2^32 ms cycle when only the overflow list holds entries,
/// so a far entry is followed for about 2^52 ms (the vectors' 64-bit edges go to 2^63 − 1).
const ROUNDS: u64 = 1 << 21;

/// The wheel, whose tick is one millisecond of the run's virtual clock. It has no size or list of pending entries
/// (cancel only unlinks an id), so the binding counts what the wheel's answers leave pending.
struct Wheel {
    wheel: QuadWheelWithOverflow<IdOnlyTimerEntry<String>>,
    now: i64,
    pending: BTreeSet<String>,
}

impl Timer for Wheel {
    fn add(&mut self, task: &str, delay_ms: i64, ran: &mut Vec<String>) -> Result<(), Rejected> {
        // the run's clock is a signed 64-bit millisecond count; the wheel itself takes any Duration
        self.now.checked_add(delay_ms).ok_or(Rejected)?;
        // an id is one timeout in the wheel: moving a task is cancelling it and inserting it anew
        self.cancel(task);
        // a deadline in the past is due now, as a zero delay is (std's saturating_duration_since idiom)
        let entry = IdOnlyTimerEntry::new(task.to_owned(), Duration::from_millis(delay_ms.max(0) as u64));
        match self.wheel.insert(entry) {
            Ok(()) => drop(self.pending.insert(task.to_owned())),
            // "The timeout has already expired": the caller runs it (what the crate's own timers do)
            Err(TimerError::Expired(entry)) => ran.push(entry.id),
            Err(TimerError::NotFound) => unreachable!("insert never answers NotFound"),
        }
        Ok(())
    }

    fn cancel(&mut self, task: &str) {
        if self.wheel.cancel(&task.to_owned()).is_ok() {
            self.pending.remove(task);
        }
    }

    fn advance(&mut self, to_ms: i64, ran: &mut Vec<String>) -> Result<(), Unrunnable> {
        let mut ticks = to_ms.saturating_sub(self.now) as u64;
        self.now = to_ms;
        // as the crate's ManualTimer does: skip what can_skip allows, tick the rest, stop when the wheel is empty
        for round in 0.. {
            if ticks == 0 {
                break;
            }
            if round == ROUNDS {
                return Err(Unrunnable(format!(
                    "{ticks} ms still to go after {ROUNDS} rounds of skip and tick: an entry beyond the wheels' \
                     2^32 ms cycle waits in the overflow list, rescanned once per cycle (the crate's design)"
                )));
            }
            match self.wheel.can_skip() {
                Skip::Empty => break,
                Skip::Millis(most) => {
                    let skip = ticks.min(most as u64);
                    self.wheel.skip(skip as u32);
                    ticks -= skip;
                }
                Skip::None => {
                    for entry in self.wheel.tick() {
                        self.pending.remove(&entry.id);
                        ran.push(entry.id.clone());
                    }
                    ticks -= 1;
                }
            }
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.pending.len() as u64
    }

    fn shutdown(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending).into_iter().collect()
    }
}

fn binding() -> Result<Box<dyn Binding>, String> {
    let implementation = "hierarchical_hash_wheel_timer 1.4.0 (wheels::cancellable::QuadWheelWithOverflow)";
    // the wheel's geometry is fixed (1 ms ticks, four 256-slot wheels and an overflow list): every tick_ms and
    // wheel_size is run, judged by the firing window the case gives for that tick
    let binding = TimerBinding::new(implementation, |params: &Params| Wheel {
        wheel: QuadWheelWithOverflow::new(),
        now: params.start_ms,
        pending: BTreeSet::new(),
    });
    Ok(Box::new(binding.contract(json!({"firing": "kafka", "lazy_size": false, "max_deadline_ms": i64::MAX,
        "beyond_max_deadline": "rejected", "negative_delays": "run_at_once"}))))
}

fn main() {
    kpurgatory_vectors::main(
        env!("CARGO_TARGET_TMPDIR"),
        &[("hierarchical_hash_wheel_timer", binding), ("stdio", kpurgatory_vectors::stdio::binding)],
    );
}
