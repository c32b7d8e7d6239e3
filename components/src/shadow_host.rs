//! Mounting the kit inside a *closed* shadow root, with every stylist style inside that root.
//!
//! Two ways in:
//! - [`ShadowHost`], a component: renders a host element, attaches the shadow root on first render
//!   and portals its children into it (for Yew apps that already own the page, e.g. the playground);
//! - [`mount_in_shadow`] (feature `csr`): creates a `<gemma-gem>` host element under a parent,
//!   attaches the shadow root and starts a Yew app in it; the returned [`ShadowMount`] unmounts it
//!   (call it when the extension context is invalidated).
//!
//! The host is kept above the page (`position: fixed`, maximum `z-index`, inline `!important` so
//! page CSS cannot override it) and lets clicks through where the UI has nothing; inside the root
//! `:host { all: initial }` stops inherited page styles.

use stylist::manager::StyleManager;
use stylist::yew::ManagerProvider;
use wasm_bindgen::JsValue;
use web_sys::{Element, ShadowRoot, ShadowRootInit, ShadowRootMode};
use yew::prelude::*;

use crate::style::ThemeRoot;
use crate::types::Theme;

/// How the host element sits in the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HostLayer {
    /// In the flow of the page (playground specimens).
    #[default]
    Inline,
    /// Covers the viewport above everything, passing clicks through except on the UI itself.
    Overlay,
}

impl HostLayer {
    /// The host element's inline style. `all: initial` first resets whatever page CSS targets the
    /// host (filters, transforms, clipping, ...); the declarations after it win over `all` because
    /// they come later in the same block, and inline `!important` beats the page's `!important`.
    pub fn host_style(self) -> &'static str {
        match self {
            Self::Inline => {
                "all: initial !important; display: block !important; position: relative !important;"
            }
            Self::Overlay => {
                "all: initial !important; display: block !important; position: fixed !important; \
                 inset: 0 !important; pointer-events: none !important; z-index: 2147483647 !important;"
            }
        }
    }
}

/// A closed shadow root attached to a host, the element the UI renders into, and a style manager
/// whose `<style>` elements go into the root.
#[derive(Clone, Debug)]
pub struct ShadowParts {
    /// Keep it: a closed root cannot be looked up again from the host.
    pub root: ShadowRoot,
    pub mount_point: Element,
    /// The style manager whose styles go into this shadow root.
    pub styles: StyleManager,
}

impl PartialEq for ShadowParts {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
            && self.mount_point == other.mount_point
            && self.styles == other.styles
    }
}

fn js_error(message: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&message.to_string())
}

/// The kit's styles in `root` without a single `<style>` element in any document: stylist writes
/// its `<style>` elements into `container`, an element that is never attached (so no
/// Content-Security-Policy check applies to them and nothing is reported), and their text is
/// mirrored into one constructed style sheet adopted by the root, kept in step by a
/// `MutationObserver` (stylist adds styles as components first render). Constructed sheets are
/// CSSOM, which no `style-src` forbids: the kit keeps its looks on sites without
/// `'unsafe-inline'` (the embeddable widget), and such sites' consoles and CSP reports stay clean.
fn adopt_styles(root: &ShadowRoot, container: &Element) -> Result<(), JsValue> {
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    let sheet = web_sys::CssStyleSheet::new()?;
    root.set_adopted_style_sheets(&js_sys::Array::of1(&sheet));
    let sync = {
        let container = container.clone();
        move || {
            let _ = sheet.replace_sync(&container.text_content().unwrap_or_default());
        }
    };
    sync();
    let callback = Closure::<dyn FnMut()>::new(sync);
    let observer = web_sys::MutationObserver::new(callback.as_ref().unchecked_ref())?;
    let options = web_sys::MutationObserverInit::new();
    options.set_child_list(true);
    options.set_subtree(true);
    options.set_character_data(true);
    observer.observe_with_options(container, &options)?;
    // The observer lives as long as the container it watches (the style manager keeps it).
    callback.forget();
    Ok(())
}

/// Attaches a closed shadow root to `host` and prepares it for the kit.
pub fn attach_closed_shadow(host: &Element) -> Result<ShadowParts, JsValue> {
    let root = host.attach_shadow(&ShadowRootInit::new(ShadowRootMode::Closed))?;
    let document = host
        .owner_document()
        .ok_or_else(|| js_error("the host element has no document"))?;
    let mount_point = document.create_element("div")?;
    mount_point.set_attribute("data-gg-mount", "")?;
    root.append_child(&mount_point)?;
    let container = document.create_element("div")?;
    adopt_styles(&root, &container)?;
    let styles = StyleManager::builder()
        .container(container.into())
        .prefix("gg".into())
        .build()
        .map_err(|e| js_error(format!("could not create the style manager: {e}")))?;
    Ok(ShadowParts {
        root,
        mount_point,
        styles,
    })
}

/// Properties of [`ShadowHost`].
#[derive(Clone, Properties, PartialEq)]
pub struct ShadowHostProps {
    /// Light, dark, or follow the system.
    #[prop_or_default]
    pub theme: Theme,
    /// How the host is layered over the page.
    #[prop_or_default]
    pub layer: HostLayer,
    /// What is mounted inside the shadow root.
    #[prop_or_default]
    pub children: Html,
}

/// Renders its children inside a closed shadow root (after the first render).
#[function_component(ShadowHost)]
pub fn shadow_host(props: &ShadowHostProps) -> Html {
    let host_ref = use_node_ref();
    let parts = use_state(|| None::<ShadowParts>);
    {
        let host_ref = host_ref.clone();
        let parts = parts.clone();
        use_effect_with((), move |_| {
            if let Some(host) = host_ref.cast::<Element>() {
                match attach_closed_shadow(&host) {
                    Ok(p) => parts.set(Some(p)),
                    Err(e) => {
                        web_sys::console::error_2(&JsValue::from_str("gemma gem: shadow root:"), &e)
                    }
                }
            }
        });
    }
    let content = parts.as_ref().map(|p| {
        create_portal(
            html! {
                <ManagerProvider manager={p.styles.clone()}>
                    <ThemeRoot theme={props.theme}>{ props.children.clone() }</ThemeRoot>
                </ManagerProvider>
            },
            p.mount_point.clone(),
        )
    });
    html! {
        <gemma-gem ref={host_ref} style={props.layer.host_style()}>{ for content }</gemma-gem>
    }
}

#[cfg(feature = "csr")]
pub use imperative::*;

#[cfg(feature = "csr")]
mod imperative {
    use super::*;
    use yew::AppHandle;
    use yew::html::BaseComponent;

    /// Properties of [`ShadowApp`].
    #[derive(Properties)]
    pub struct ShadowAppProps<C: BaseComponent>
    where
        C::Properties: Clone + PartialEq,
    {
        /// The style manager whose styles go into this shadow root.
        pub styles: StyleManager,
        /// Light, dark, or follow the system.
        pub theme: Theme,
        /// The properties of the component mounted inside.
        pub inner: C::Properties,
    }

    impl<C: BaseComponent> PartialEq for ShadowAppProps<C>
    where
        C::Properties: Clone + PartialEq,
    {
        fn eq(&self, other: &Self) -> bool {
            self.styles == other.styles && self.theme == other.theme && self.inner == other.inner
        }
    }

    /// The root of an app started by [`mount_in_shadow`]: styles into the root, theme, component.
    #[function_component(ShadowApp)]
    pub fn shadow_app<C>(props: &ShadowAppProps<C>) -> Html
    where
        C: BaseComponent,
        C::Properties: Clone + PartialEq,
    {
        html! {
            <ManagerProvider manager={props.styles.clone()}>
                <ThemeRoot theme={props.theme}>
                    <C ..props.inner.clone() />
                </ThemeRoot>
            </ManagerProvider>
        }
    }

    /// A Yew app running in a closed shadow root; [`ShadowMount::unmount`] removes it.
    pub struct ShadowMount<C: BaseComponent>
    where
        C::Properties: Clone + PartialEq,
    {
        host: Element,
        root: ShadowRoot,
        app: AppHandle<ShadowApp<C>>,
    }

    impl<C: BaseComponent> ShadowMount<C>
    where
        C::Properties: Clone + PartialEq,
    {
        /// The host element in the page (its shadow root is closed).
        pub fn host(&self) -> &Element {
            &self.host
        }

        /// The closed shadow root (only this handle can reach it).
        pub fn root(&self) -> &ShadowRoot {
            &self.root
        }

        /// Stops the app and removes the host element from the page.
        pub fn unmount(self) {
            self.app.destroy();
            self.host.remove();
        }
    }

    /// Creates a `<gemma-gem>` host under `parent`, attaches a closed shadow root and renders `C`
    /// with `props` inside it.
    pub fn mount_in_shadow<C>(
        parent: &Element,
        layer: HostLayer,
        theme: Theme,
        props: C::Properties,
    ) -> Result<ShadowMount<C>, JsValue>
    where
        C: BaseComponent,
        C::Properties: Clone + PartialEq,
    {
        let document = parent
            .owner_document()
            .ok_or_else(|| js_error("the parent element has no document"))?;
        let host = document.create_element("gemma-gem")?;
        host.set_attribute("style", layer.host_style())?;
        parent.append_child(&host)?;
        let parts = match attach_closed_shadow(&host) {
            Ok(parts) => parts,
            Err(e) => {
                host.remove();
                return Err(e);
            }
        };
        let root = parts.root.clone();
        let app = yew::Renderer::<ShadowApp<C>>::with_root_and_props(
            parts.mount_point,
            ShadowAppProps {
                styles: parts.styles,
                theme,
                inner: props,
            },
        )
        .render();
        Ok(ShadowMount { host, root, app })
    }
}
