// Keyboard focus stays inside an open modal dialog (Settings, Launch, Delete, the
// first-run welcome): Tab from its last control wraps to its first, Shift+Tab from its
// first to its last. Chromium's native modal <dialog> only makes the page behind it
// inert; Tab still leaves the dialog for the browser's own controls. Closing a dialog
// returns focus to the control that opened it (the native <dialog> restores it; the
// Models dialogs also do it by hand for openers redrawn meanwhile).

const FOCUSABLE = [
  "a[href]",
  "button:not([disabled])",
  "input:not([disabled]):not([type='hidden'])",
  "select:not([disabled])",
  "textarea:not([disabled])",
  "summary",
  "[tabindex]:not([tabindex='-1'])",
].join(",");

function openModal() {
  const dialogs = [...document.querySelectorAll("dialog[open]")].filter((d) => d.matches(":modal"));
  return dialogs.at(-1) || null; // the topmost: the last one shown
}

function focusables(dialog) {
  return [...dialog.querySelectorAll(FOCUSABLE)].filter(
    (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden" && !el.closest("[inert]"),
  );
}

/** Installs the one keydown listener that keeps Tab inside the topmost modal dialog. */
export function trapDialogFocus(doc = document) {
  doc.addEventListener("keydown", (event) => {
    if (event.key !== "Tab" || event.altKey || event.ctrlKey || event.metaKey) return;
    const dialog = openModal();
    if (!dialog) return;
    const items = focusables(dialog);
    if (items.length === 0) {
      event.preventDefault();
      return;
    }
    const first = items[0];
    const last = items[items.length - 1];
    const active = doc.activeElement;
    const inside = active instanceof Element && dialog.contains(active);
    if (event.shiftKey && (!inside || active === first)) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && (!inside || active === last)) {
      event.preventDefault();
      first.focus();
    }
  });
}
