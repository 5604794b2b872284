// Placeholder: the Performance page is being written (issue #37). It follows the page
// contract at the top of static/app.js.
import { h, replace } from "../dom.js";

export async function mount(root, ctx) {
  replace(root, ctx.dialog ? null : h("h1", null, "Performance"), h("p", null, "Coming soon."));
  return () => {};
}
