// The cluster view (#/cluster), shown when the broker is a node of a cluster (its tab is
// hidden otherwise: /api/cluster answers 404): every node as this one sees it (address,
// up or down and why, the nodes it is linked to; this node marked), then each destination
// loaded with its depth on each node and the cluster's total, from the per-node figures
// /api/destinations gives on a node. A node that is down has no figures: its column
// stays empty. On a node with backups (high availability), this process's role, the
// node's epoch, and (on the live) each backup's state, above the nodes.
import { h, num } from "./lib.js";

export function clusterFrame() {
  return h("section", {},
    h("h1", {}, "Cluster"),
    h("p", { class: "muted", id: "cluster-name" }),
    h("div", { class: "card", id: "cluster-ha", hidden: true }),
    h("div", { class: "card", id: "cluster-nodes" }, h("p", { class: "empty" }, "Loading…")),
    h("h2", {}, "Depth per node"),
    h("div", { class: "card", id: "cluster-depths" }, h("p", { class: "empty" }, "Loading…")));
}

function nodesTable(cluster) {
  return h("table", { id: "node-table" },
    h("thead", {}, h("tr", {},
      h("th", {}, "Node"), h("th", {}, "Address"), h("th", {}, "State"), h("th", {}, "Links"))),
    h("tbody", {}, cluster.nodes.map((n) => h("tr", { dataset: { node: n.name } },
      h("td", { class: "name" }, n.name,
        n.name === cluster.node ? h("span", { class: "muted" }, " (this node)") : null),
      h("td", { class: "mono" }, n.address || "–"),
      h("td", { class: "node-state" },
        h("span", { class: `chip node-${n.state}` }, n.state),
        n.reason ? h("span", { class: "muted reason" }, ` ${n.reason}`) : null),
      h("td", { class: "links" }, (n.links || []).join(", ") || "–")))));
}

function haCard(cluster) {
  const role = h("p", { id: "ha-role" },
    "This process is the node's ", h("span", { class: `chip ha-${cluster.role}` }, cluster.role),
    ` (epoch ${num(cluster.epoch)}).`);
  const backups = cluster.backups || [];
  if (!backups.length) return [role, h("p", { class: "empty" }, "No backup has connected.")];
  return [role, h("table", { id: "backup-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "Backup"), h("th", {}, "State"))),
    h("tbody", {}, backups.map((b) => h("tr", { dataset: { address: b.address } },
      h("td", { class: "mono" }, b.address),
      h("td", { class: "backup-state" }, h("span", { class: `chip backup-${b.state}` }, b.state))))))];
}

function depthsTable(cluster, destinations) {
  const names = cluster.nodes.map((n) => n.name);
  if (!destinations.length) return h("p", { class: "empty" }, "No destinations.");
  return h("table", { id: "depth-table" },
    h("thead", {}, h("tr", {},
      h("th", {}, "Address"),
      ...names.map((name) => h("th", { class: "num node-name" }, name)),
      h("th", { class: "num" }, "Cluster"))),
    h("tbody", {}, destinations.map((d) => h("tr", { dataset: { address: d.address } },
      h("td", { class: "address" }, d.address),
      ...names.map((name) => {
        const here = (d.nodes || {})[name];
        return h("td", { class: "num", dataset: { node: name } }, here ? num(here.depth) : "");
      }),
      h("td", { class: "num total" }, num((d.total || d).depth))))));
}

// `cluster`: /api/cluster's document (null: not loaded yet); `destinations`: those loaded.
export function fillCluster(cluster, destinations) {
  const nodes = document.getElementById("cluster-nodes");
  if (!nodes || !cluster) return;
  const up = cluster.nodes.filter((n) => n.state === "up").length;
  document.getElementById("cluster-name").textContent = `Cluster ${cluster.name}, seen from `
    + `node ${cluster.node}: ${num(up)} of ${num(cluster.nodes.length)} nodes up.`;
  nodes.replaceChildren(nodesTable(cluster));
  const ha = document.getElementById("cluster-ha");
  ha.hidden = !cluster.role;
  if (cluster.role) ha.replaceChildren(...haCard(cluster));
  document.getElementById("cluster-depths").replaceChildren(depthsTable(cluster, destinations));
}
