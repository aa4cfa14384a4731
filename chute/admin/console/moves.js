// Moves and retries run on the broker as jobs (POST .../move or .../retry answers at once
// with one): the console follows a job by polling GET /api/moves/<id> every JOB_POLL_MS,
// shows how far it got in a bar of its own with a Cancel button (DELETE /api/moves/<id>),
// and cancels the jobs it follows when the page goes away (a move nobody watches any
// more does not run on). Built with DOM calls only, as the rest of the console.
import { ApiError, api, h, num, plural } from "./lib.js";

const JOB_POLL_MS = 500;
const following = new Map(); // job id -> the job as last seen

// Where a job's progress shows: a bar under the notice, made on first use.
function jobBar() {
  let bar = document.getElementById("move-job");
  if (!bar) {
    bar = h("div", { class: "notice", id: "move-job", role: "status", hidden: true });
    document.getElementById("notice").after(bar);
  }
  return bar;
}

function progress(job) {
  const what = job.kind === "retry" ? `Retrying dead letters of ${job.from}` : `Moving ${job.from} to ${job.to}`;
  const left = job.remaining === null ? "" : `, ${num(job.remaining)} waiting`;
  return `${what}: ${plural(job.moved, "message")} moved${left} (${num(Math.round(job.rate))}/s)`;
}

function show(jobs) {
  const bar = jobBar();
  bar.replaceChildren(...[...jobs].map((job) => h("span", {},
    h("span", { class: "move-progress" }, progress(job)), " ",
    h("button", {
      type: "button", class: "small ghost", onclick: () => cancelJob(job.id),
    }, "Cancel"))));
  bar.hidden = jobs.length === 0;
}

async function cancelJob(id) {
  try {
    await api("DELETE", `/api/moves/${encodeURIComponent(id)}`);
  } catch {
    // it ended meanwhile: the next poll says how
  }
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Follow `job` (a POST's answer) until it ends; returns the ended job. A job that failed
// or was cancelled throws, with what it moved before.
export async function follow(job) {
  following.set(job.id, job);
  try {
    while (job.state === "running") {
      show([...following.values()]);
      await sleep(JOB_POLL_MS);
      job = await api("GET", `/api/moves/${encodeURIComponent(job.id)}`);
      following.set(job.id, job);
    }
  } finally {
    following.delete(job.id);
    show([...following.values()]);
  }
  if (job.state !== "done") {
    const why = job.error ? job.error.message : job.state;
    throw new ApiError(409, job.error ? job.error.error : job.state,
      `${why} (${plural(job.moved, "message")} had moved)`);
  }
  return job;
}

// The page goes away: cancel what it follows (keepalive: the request outlives the page).
addEventListener("pagehide", () => {
  for (const id of following.keys()) {
    fetch(`/api/moves/${encodeURIComponent(id)}`, {
      method: "DELETE", credentials: "same-origin", keepalive: true,
    }).catch(() => {});
  }
});
