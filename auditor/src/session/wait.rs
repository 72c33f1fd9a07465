//! The wait of every session, whichever source counts: until the source's work ends by
//! itself (the started command exits, the followed processes are gone, strace finishes),
//! or a stop signal or the `--duration` asks it to end. Then the signal is passed on (or
//! SIGTERM for the duration) and the work gets [`STOP_GRACE`] to end. A source plugs in
//! as a [`Running`]: what it waits for, what it does on each tick (the exporter's answers,
//! the status line), how it passes a stop on.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{StopRequest, stop_requested};
use crate::Error;

/// How long a source's work has to end after the session passed it a stop.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How often the wait looks.
const TICK: Duration = Duration::from_millis(20);

/// A source's work while its session waits.
pub(crate) trait Running {
    /// How the work ended by itself.
    type Ending;

    /// The work's end, once it came.
    fn ended(&mut self) -> Result<Option<Self::Ending>, Error>;

    /// Called on every tick while the work runs, `elapsed` since the wait began.
    fn tick(&mut self, _elapsed: Duration) -> Result<(), Error> {
        Ok(())
    }

    /// Asks the work to end, passing on `signal` (None: the terminal sent the stop signal
    /// to the traced command already).
    fn stop(&mut self, signal: Option<Signal>) -> Stopping;
}

/// What a source said to a stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stopping {
    /// Nothing runs that has to end first: the session ends now.
    Now,
    /// Passed on: wait for the work to end, up to [`STOP_GRACE`].
    Passed,
    /// Not yet passed on (what it goes to is not there yet): asked again on the next tick.
    NotYet,
}

/// Why the session asked the work to end.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cause {
    Signal(StopRequest),
    Duration,
}

/// How a wait ended.
#[derive(Debug)]
pub(crate) enum End<E> {
    /// The work ended by itself.
    Ended(E),
    /// The session asked it to end; `ended` is its end if it came within the grace.
    Stopped { cause: Cause, ended: Option<E> },
}

impl<E> End<E> {
    /// The note a report carries when a started command outlived the grace after the
    /// session asked it to end, and was left running.
    pub(crate) fn left_running(&self) -> Option<String> {
        match self {
            End::Stopped {
                cause: Cause::Signal(stop),
                ended: None,
            } => Some(format!(
                "The session ended on {}; the command was still running {} s later and was \
                 left running.",
                crate::status::signal_name(stop.signal),
                STOP_GRACE.as_secs()
            )),
            End::Stopped {
                cause: Cause::Duration,
                ended: None,
            } => Some(format!(
                "The session ended after its --duration; the command was sent SIGTERM and was \
                 still running {} s later, so it was left running.",
                STOP_GRACE.as_secs()
            )),
            _ => None,
        }
    }
}

/// Waits for `running`'s end, or stops it on a signal or once `duration` has passed since
/// `started`.
pub(crate) fn wait<R: Running>(
    running: &mut R,
    started: Instant,
    duration: Option<Duration>,
) -> Result<End<R::Ending>, Error> {
    loop {
        if let Some(ending) = running.ended()? {
            return Ok(End::Ended(ending));
        }
        let cause = match stop_requested() {
            Some(stop) => Some(Cause::Signal(stop)),
            None if duration.is_some_and(|d| started.elapsed() >= d) => Some(Cause::Duration),
            None => None,
        };
        if let Some(cause) = cause {
            let ended = stop(running, cause)?;
            return Ok(End::Stopped { cause, ended });
        }
        running.tick(started.elapsed())?;
        std::thread::sleep(TICK);
    }
}

/// Passes the stop on and waits up to [`STOP_GRACE`] for the work's end.
fn stop<R: Running>(running: &mut R, cause: Cause) -> Result<Option<R::Ending>, Error> {
    let signal = match cause {
        // From the terminal, it reached the traced command already; a signal sent to the
        // auditor alone is passed on, as strace and perf do.
        Cause::Signal(stop) if stop.from_terminal => None,
        Cause::Signal(stop) => Some(Signal::try_from(stop.signal).unwrap_or(Signal::SIGTERM)),
        // As timeout(1).
        Cause::Duration => Some(Signal::SIGTERM),
    };
    let deadline = Instant::now() + STOP_GRACE;
    let mut stopping = running.stop(signal);
    loop {
        if stopping == Stopping::Now {
            return Ok(None);
        }
        if let Some(ending) = running.ended()? {
            return Ok(Some(ending));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
        if stopping == Stopping::NotYet {
            stopping = running.stop(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work that ends after `ends_after` looks, or `after_stop` looks once stopped.
    struct Work {
        looks: u32,
        ends_after: Option<u32>,
        stopped_at: Option<u32>,
        after_stop: Option<u32>,
        answer: Stopping,
        signals: Vec<Option<Signal>>,
        ticks: u32,
    }

    impl Work {
        fn new(answer: Stopping) -> Work {
            Work {
                looks: 0,
                ends_after: None,
                stopped_at: None,
                after_stop: None,
                answer,
                signals: Vec::new(),
                ticks: 0,
            }
        }
    }

    impl Running for Work {
        type Ending = u32;

        fn ended(&mut self) -> Result<Option<u32>, Error> {
            self.looks += 1;
            let by_itself = self.ends_after.is_some_and(|n| self.looks > n);
            let by_stop = matches!((self.stopped_at, self.after_stop), (Some(at), Some(n)) if self.looks > at + n);
            Ok((by_itself || by_stop).then_some(self.looks))
        }

        fn tick(&mut self, _elapsed: Duration) -> Result<(), Error> {
            self.ticks += 1;
            Ok(())
        }

        fn stop(&mut self, signal: Option<Signal>) -> Stopping {
            self.signals.push(signal);
            self.stopped_at.get_or_insert(self.looks);
            let answer = self.answer;
            // Passed on the second time it is asked.
            if answer == Stopping::NotYet {
                self.answer = Stopping::Passed;
            }
            answer
        }
    }

    #[test]
    fn work_that_ends_by_itself_ends_the_wait() {
        let mut work = Work::new(Stopping::Passed);
        work.ends_after = Some(3);
        let end = wait(&mut work, Instant::now(), None).unwrap();
        assert!(matches!(end, End::Ended(4)), "{end:?}");
        assert_eq!(work.ticks, 3);
        assert!(work.signals.is_empty());
    }

    #[test]
    fn a_duration_sends_sigterm_and_waits_for_the_end() {
        let mut work = Work::new(Stopping::Passed);
        work.after_stop = Some(2);
        let end = wait(&mut work, Instant::now(), Some(Duration::ZERO)).unwrap();
        assert!(
            matches!(
                end,
                End::Stopped {
                    cause: Cause::Duration,
                    ended: Some(4)
                }
            ),
            "{end:?}"
        );
        assert_eq!(work.signals, [Some(Signal::SIGTERM)]);
    }

    #[test]
    fn nothing_to_wait_for_ends_at_once() {
        let mut work = Work::new(Stopping::Now);
        let started = Instant::now();
        let end = wait(&mut work, started, Some(Duration::ZERO)).unwrap();
        assert!(matches!(end, End::Stopped { ended: None, .. }), "{end:?}");
        assert!(started.elapsed() < STOP_GRACE);
    }

    #[test]
    fn a_stop_not_yet_passed_on_is_asked_again_and_work_that_outlives_the_grace_is_left() {
        let mut work = Work::new(Stopping::NotYet);
        let started = Instant::now();
        let end = wait(&mut work, started, Some(Duration::ZERO)).unwrap();
        assert!(matches!(end, End::Stopped { ended: None, .. }), "{end:?}");
        assert!(started.elapsed() >= STOP_GRACE);
        assert_eq!(work.signals, [Some(Signal::SIGTERM), Some(Signal::SIGTERM)]);
    }
}
